/*
 * The wire-frame parsers (src/comm/wire.h) fed malformed and partial
 * frames directly: each must ask for exactly the bytes it still needs,
 * refuse a wrong byte as soon as it is in, and never accept lengths
 * beyond their bounds. And the proofs of the challenge-response: bound to
 * the side, the key, the opening's every byte and the acceptor's nonce.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "comm/comm.h"
#include "comm/transport/transport.h"
#include "comm/transport/wire.h"

#include <string.h>

static const unsigned char NONCE[COMM_WIRE_NONCE] = "0123456789abcdef";

static void test_store_hello(void **state)
{
    (void)state;
    comm_rank_info self = {.addr = 0x0100007f, .port = 4242, .pid = 77, .machine = 5};
    strcpy(self.host, "node-a");
    unsigned char b[COMM_WIRE_HELLO_FRAME];
    comm_wire_hello_pack(b, 3, 8, NONCE, &self);
    assert_memory_equal(b + COMM_WIRE_HDR + 8, NONCE, COMM_WIRE_NONCE);
    comm_wire_hello h;
    size_t need;
    /* Whole: every field back. */
    assert_int_equal(comm_wire_hello_parse(b, sizeof b, &h, &need), AI_OK);
    assert_int_equal(need, 0);
    assert_int_equal(h.rank, 3);
    assert_int_equal(h.size, 8);
    assert_int_equal(h.entry.port, 4242);
    assert_int_equal(h.entry.pid, 77);
    assert_string_equal(h.entry.host, "node-a");
    /* Every prefix is a valid beginning asking for no more than the rest. */
    for (size_t n = 1; n < sizeof b; n++) {
        assert_int_equal(comm_wire_hello_parse(b, n, &h, &need), AI_OK);
        assert_true(need > 0 && n + need <= sizeof b);
    }
    /* A wrong first byte is refused at once. */
    assert_int_equal(comm_wire_hello_parse((const unsigned char *)"G", 1, &h, &need),
                     AI_ERR_PROTO);
    assert_non_null(strstr(ai_last_error(), "not an autoinfra peer"));
    /* Another version, another type, another body length. */
    unsigned char bad[COMM_WIRE_HELLO_FRAME];
    memcpy(bad, b, sizeof b);
    bad[4] = 99;
    assert_int_equal(comm_wire_hello_parse(bad, 6, &h, &need), AI_ERR_PROTO);
    assert_non_null(strstr(ai_last_error(), "wrong protocol version"));
    memcpy(bad, b, sizeof b);
    bad[6] = COMM_WIRE_TABLE;
    assert_int_equal(comm_wire_hello_parse(bad, sizeof bad, &h, &need), AI_ERR_PROTO);
    memcpy(bad, b, sizeof b);
    bad[8] ^= 1;
    assert_int_equal(comm_wire_hello_parse(bad, COMM_WIRE_HDR, &h, &need), AI_ERR_PROTO);
    /* A host name without its NUL comes back terminated. */
    memcpy(bad, b, sizeof b);
    memset(bad + COMM_WIRE_HDR + 8 + COMM_WIRE_NONCE + 20, 'x', COMM_HOST_MAX);
    assert_int_equal(comm_wire_hello_parse(bad, sizeof bad, &h, &need), AI_OK);
    assert_int_equal(strlen(h.entry.host), COMM_HOST_MAX - 1);
}

static void test_store_reply(void **state)
{
    (void)state;
    comm_rank_info table[2], in[2] = {{.port = 1}, {.port = 2}};
    strcpy(in[1].host, "node-b");
    unsigned char b[COMM_WIRE_HDR + 2 * COMM_WIRE_ENTRY];
    comm_wire_hdr_pack(b, COMM_WIRE_TABLE, 2 * COMM_WIRE_ENTRY);
    comm_wire_entry_pack(b + COMM_WIRE_HDR, &in[0]);
    comm_wire_entry_pack(b + COMM_WIRE_HDR + COMM_WIRE_ENTRY, &in[1]);
    char why[COMM_WIRE_REASON_MAX + 1];
    int rejected;
    size_t need;
    assert_int_equal(comm_wire_reply_parse(b, COMM_WIRE_HDR, 2, table, why, &rejected, &need), AI_OK);
    assert_int_equal(need, 2 * COMM_WIRE_ENTRY);
    assert_int_equal(comm_wire_reply_parse(b, sizeof b, 2, table, why, &rejected, &need), AI_OK);
    assert_int_equal(need, 0);
    assert_false(rejected);
    assert_int_equal(table[1].port, 2);
    assert_string_equal(table[1].host, "node-b");
    /* A table for another job size is refused, whatever its length. */
    assert_int_equal(comm_wire_reply_parse(b, sizeof b, 3, table, why, &rejected, &need),
                     AI_ERR_PROTO);
    /* A refusal carries its reason; one longer than the bound is refused. */
    unsigned char r[COMM_WIRE_HDR + 5];
    comm_wire_hdr_pack(r, COMM_WIRE_REJECT, 5);
    memcpy(r + COMM_WIRE_HDR, "nope!", 5);
    assert_int_equal(comm_wire_reply_parse(r, sizeof r, 2, table, why, &rejected, &need), AI_OK);
    assert_true(rejected);
    assert_string_equal(why, "nope!");
    comm_wire_hdr_pack(r, COMM_WIRE_REJECT, COMM_WIRE_REASON_MAX + 1);
    assert_int_equal(comm_wire_reply_parse(r, COMM_WIRE_HDR, 2, table, why, &rejected, &need),
                     AI_ERR_PROTO);
}

static void test_data_hello(void **state)
{
    (void)state;
    unsigned char b[COMM_WIRE_DATA_HELLO];
    comm_wire_data_hello_pack(b, NONCE, 5, 2, COMM_WIRE_CTL_CHAN);
    uint32_t from, to;
    uint16_t chan;
    size_t need;
    assert_int_equal(comm_wire_data_hello_parse(b, 10, &from, &to, &chan, &need), AI_OK);
    assert_int_equal(need, COMM_WIRE_DATA_HELLO - 10);
    assert_int_equal(comm_wire_data_hello_parse(b, sizeof b, &from, &to, &chan, &need), AI_OK);
    assert_int_equal(need, 0);
    assert_int_equal(from, 5);
    assert_int_equal(to, 2);
    assert_int_equal(chan, COMM_WIRE_CTL_CHAN);
    assert_memory_equal(b + 16, NONCE, COMM_WIRE_NONCE);
    /* A store hello sent to a data port is not a data hello. */
    assert_int_equal(comm_wire_data_hello_parse((const unsigned char *)"AIBS", 4, &from, &to,
                                                &chan, &need), AI_ERR_PROTO);
}

static void test_challenge_and_proof(void **state)
{
    (void)state;
    unsigned char mac[COMM_WIRE_MAC], nonce[COMM_WIRE_NONCE], got[COMM_WIRE_MAC];
    memset(mac, 0xa5, sizeof mac);
    unsigned char ch[COMM_WIRE_CHALLENGE], pf[COMM_WIRE_PROOF];
    comm_wire_challenge_pack(ch, NONCE, mac);
    comm_wire_proof_pack(pf, mac);
    size_t need;
    for (size_t n = 1; n < sizeof ch; n++) {
        assert_int_equal(comm_wire_challenge_parse(ch, n, nonce, got, &need), AI_OK);
        assert_int_equal(need, sizeof ch - n);
    }
    assert_int_equal(comm_wire_challenge_parse(ch, sizeof ch, nonce, got, &need), AI_OK);
    assert_int_equal(need, 0);
    assert_memory_equal(nonce, NONCE, COMM_WIRE_NONCE);
    assert_memory_equal(got, mac, COMM_WIRE_MAC);
    for (size_t n = 1; n < sizeof pf; n++) {
        assert_int_equal(comm_wire_proof_parse(pf, n, got, &need), AI_OK);
        assert_int_equal(need, sizeof pf - n);
    }
    memset(got, 0, sizeof got);
    assert_int_equal(comm_wire_proof_parse(pf, sizeof pf, got, &need), AI_OK);
    assert_int_equal(need, 0);
    assert_memory_equal(got, mac, COMM_WIRE_MAC);
    /* Neither is the other, and a wrong version is refused. */
    assert_int_equal(comm_wire_proof_parse(ch, 4, got, &need), AI_ERR_PROTO);
    assert_int_equal(comm_wire_challenge_parse(pf, 4, nonce, got, &need), AI_ERR_PROTO);
    pf[4] ^= 1;
    assert_int_equal(comm_wire_proof_parse(pf, 6, got, &need), AI_ERR_PROTO);
    assert_non_null(strstr(ai_last_error(), "wrong protocol version"));
}

/* A proof changes with the side, the key, any byte of the opening and
 * the nonce; the key from a token is not the token's bytes. */
static void test_proofs_bind(void **state)
{
    (void)state;
    unsigned char k1[COMM_KEY_BYTES], k2[COMM_KEY_BYTES], open[COMM_WIRE_DATA_HELLO];
    comm_token_key("alpha", k1);
    comm_token_key("alphb", k2);
    assert_memory_not_equal(k1, k2, COMM_KEY_BYTES);
    comm_token_key("alpha", k2);
    assert_memory_equal(k1, k2, COMM_KEY_BYTES);
    comm_token_key("alphb", k2);
    comm_wire_data_hello_pack(open, NONCE, 1, 0, 0);
    unsigned char base[AI_MAC_BYTES], m[AI_MAC_BYTES], n2[AI_NONCE_BYTES];
    comm_auth_proof(base, k1, 0, open, sizeof open, NONCE);
    comm_auth_proof(m, k1, 0, open, sizeof open, NONCE);
    assert_memory_equal(base, m, AI_MAC_BYTES);
    comm_auth_proof(m, k1, 1, open, sizeof open, NONCE);
    assert_memory_not_equal(base, m, AI_MAC_BYTES);
    comm_auth_proof(m, k2, 0, open, sizeof open, NONCE);
    assert_memory_not_equal(base, m, AI_MAC_BYTES);
    memcpy(n2, NONCE, sizeof n2);
    n2[15] ^= 1;
    comm_auth_proof(m, k1, 0, open, sizeof open, n2);
    assert_memory_not_equal(base, m, AI_MAC_BYTES);
    for (size_t i = 0; i < sizeof open; i++) {
        open[i] ^= 0x10;
        comm_auth_proof(m, k1, 0, open, sizeof open, NONCE);
        assert_memory_not_equal(base, m, AI_MAC_BYTES);
        open[i] ^= 0x10;
    }
}

static void test_abort_notice(void **state)
{
    (void)state;
    unsigned char b[COMM_WIRE_ABORT_HDR + COMM_WIRE_ABORT_REASON_MAX];
    char reason[COMM_WIRE_ABORT_REASON_MAX + 1], longer[COMM_WIRE_ABORT_REASON_MAX + 50];
    int32_t origin;
    int revoked = -1;
    size_t need;
    size_t n = comm_wire_abort_pack(b, 4, 0, "rank 4 died");
    assert_int_equal(comm_wire_abort_parse(b, COMM_WIRE_ABORT_HDR, &origin, &revoked, reason, &need), AI_OK);
    assert_int_equal(need, strlen("rank 4 died"));
    assert_int_equal(comm_wire_abort_parse(b, n, &origin, &revoked, reason, &need), AI_OK);
    assert_int_equal(need, 0);
    assert_int_equal(origin, 4);
    assert_string_equal(reason, "rank 4 died");
    assert_int_equal(revoked, 0);
    /* A reason past the bound is cut when packed ... */
    memset(longer, 'z', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    n = comm_wire_abort_pack(b, 1, 1, longer);
    assert_int_equal(n, sizeof b);
    assert_int_equal(comm_wire_abort_parse(b, n, &origin, &revoked, reason, &need), AI_OK);
    assert_int_equal(strlen(reason), COMM_WIRE_ABORT_REASON_MAX);
    assert_int_equal(revoked, 1); /* a revoke notice: magic "AIRV" */
    /* ... and refused when a peer claims one. */
    uint16_t len = COMM_WIRE_ABORT_REASON_MAX + 1;
    memcpy(b + 6, &len, 2);
    assert_int_equal(comm_wire_abort_parse(b, COMM_WIRE_ABORT_HDR, &origin, &revoked, reason, &need),
                     AI_ERR_PROTO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_hello),
        cmocka_unit_test(test_store_reply),
        cmocka_unit_test(test_data_hello),
        cmocka_unit_test(test_challenge_and_proof),
        cmocka_unit_test(test_proofs_bind),
        cmocka_unit_test(test_abort_notice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
