/*
 * The few cryptographic operations the job token's handshake needs, over
 * libsodium: key derivation (BLAKE2b), MACs (HMAC-SHA-512-256, compared in
 * constant time) and random nonces. sodium_init runs once per process,
 * from whichever thread comes first.
 */
#include "util/util.h"

#include <pthread.h>
#include <sodium.h>
#include <string.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int init_rc = -1;

static void init_once(void)
{
    init_rc = sodium_init() < 0 ? -1 : 0;
}

ai_status_t util_crypto_init(void)
{
    pthread_once(&once, init_once);
    if (init_rc != 0)
        return util_fail(AI_ERR_IO, "libsodium failed to initialise (no system random source?)");
    return AI_OK;
}

void util_random_bytes(void *buf, size_t n)
{
    pthread_once(&once, init_once);
    randombytes_buf(buf, n);
}

void util_key_derive(unsigned char out[AI_KEY_BYTES], const unsigned char *parent, const char *label,
                     const void *data, size_t n)
{
    crypto_generichash_state st;
    pthread_once(&once, init_once);
    crypto_generichash_init(&st, parent, parent ? AI_KEY_BYTES : 0, AI_KEY_BYTES);
    crypto_generichash_update(&st, (const unsigned char *)label, strlen(label) + 1);
    if (n)
        crypto_generichash_update(&st, data, n);
    crypto_generichash_final(&st, out, AI_KEY_BYTES);
    sodium_memzero(&st, sizeof st);
}

void util_mac(unsigned char out[AI_MAC_BYTES], const unsigned char key[AI_KEY_BYTES],
              const ai_mac_part *parts, int nparts)
{
    crypto_auth_hmacsha512256_state st;
    pthread_once(&once, init_once);
    crypto_auth_hmacsha512256_init(&st, key, AI_KEY_BYTES);
    for (int i = 0; i < nparts; i++)
        if (parts[i].n)
            crypto_auth_hmacsha512256_update(&st, parts[i].p, parts[i].n);
    crypto_auth_hmacsha512256_final(&st, out);
    sodium_memzero(&st, sizeof st);
}

int util_mac_verify(const unsigned char mac[AI_MAC_BYTES], const unsigned char key[AI_KEY_BYTES],
                    const ai_mac_part *parts, int nparts)
{
    unsigned char want[AI_MAC_BYTES];
    util_mac(want, key, parts, nparts);
    int ok = crypto_verify_32(want, mac) == 0;
    sodium_memzero(want, sizeof want);
    return ok;
}

void util_wipe(void *p, size_t n)
{
    sodium_memzero(p, n);
}
