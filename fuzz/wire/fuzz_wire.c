/*
 * libFuzzer harness for the frames a rank parses before it trusts a peer
 * (src/comm/wire.h): the store's hello, the store's answer (table or
 * refusal), the data hello, the abort notice and the handshake's challenge
 * and proof. The first input byte picks the parser (its low two bits; for
 * 3, bits 2-3 pick abort, challenge or proof) and the table's size (bits
 * 2-4); the rest is what arrived. Besides memory errors (ASan) and
 * undefined behaviour (UBSan) it checks what the parsers promise:
 *  - a valid beginning asks for more bytes, never past the frame's end;
 *  - parsing is prefix-monotone: reading as a socket reader would (as
 *    many bytes as the parser asks for), a frame accepted whole is
 *    reached, a prefix refused is refused whole, and a whole frame is not
 *    changed by bytes after it;
 *  - a frame completed with whatever bytes it asks for ends, complete or
 *    refused, within a few requests;
 *  - text handed back is NUL-terminated within its bound.
 * Built and run by `make fuzz-wire` (clang -fsanitize=fuzzer,address,undefined).
 */
#include "comm/transport/wire.h"

#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_RANKS 8

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if (!(x))                                                                                  \
            abort();                                                                               \
    } while (0)

/* One parse of b[0..len): 1 complete, 0 wants more (*need), -1 refused. */
static int parse(int which, uint32_t size, const unsigned char *b, size_t len, size_t *need)
{
    comm_wire_hello h;
    comm_rank_info table[FUZZ_MAX_RANKS];
    char why[COMM_WIRE_REASON_MAX + 1], reason[COMM_WIRE_ABORT_REASON_MAX + 1];
    uint32_t from, to;
    uint16_t chan;
    unsigned char nonce[COMM_WIRE_NONCE], mac[COMM_WIRE_MAC];
    int32_t origin;
    int revoked;
    int rejected;
    ai_status_t st;
    *need = 0;
    switch (which) {
    case 0:
        st = comm_wire_hello_parse(b, len, &h, need);
        if (st == AI_OK && !*need)
            CHECK(strlen(h.entry.host) < COMM_HOST_MAX);
        break;
    case 1:
        st = comm_wire_reply_parse(b, len, size, table, why, &rejected, need);
        if (st == AI_OK && !*need && rejected)
            CHECK(strlen(why) <= COMM_WIRE_REASON_MAX);
        if (st == AI_OK && !*need && !rejected)
            for (uint32_t r = 0; r < size; r++)
                CHECK(strlen(table[r].host) < COMM_HOST_MAX);
        break;
    case 2:
        st = comm_wire_data_hello_parse(b, len, &from, &to, &chan, need);
        break;
    case 4:
        st = comm_wire_challenge_parse(b, len, nonce, mac, need);
        break;
    case 5:
        st = comm_wire_proof_parse(b, len, mac, need);
        break;
    default:
        st = comm_wire_abort_parse(b, len, &origin, &revoked, reason, need);
        if (st == AI_OK && !*need)
            CHECK(strlen(reason) <= COMM_WIRE_ABORT_REASON_MAX);
        break;
    }
    if (st != AI_OK) {
        CHECK(st == AI_ERR_PROTO);
        return -1;
    }
    return *need ? 0 : 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int which = data[0] & 3;
    if (which == 3 && ((data[0] >> 2) & 3) == 1)
        which = 4;
    else if (which == 3 && ((data[0] >> 2) & 3) == 2)
        which = 5;
    uint32_t nranks = 1 + (uint32_t)((data[0] >> 2) % FUZZ_MAX_RANKS);
    size_t len = size - 1;
    /* A copy of exactly len bytes, so reading past the input is caught. */
    unsigned char *b = malloc(len);
    if (!b)
        return 0;
    memcpy(b, data + 1, len);
    size_t need;
    int whole = parse(which, nranks, b, len, &need);
    if (whole == 0)
        CHECK(need > 0 && need <= (size_t)COMM_WIRE_HDR + (size_t)nranks * COMM_WIRE_ENTRY +
                                       COMM_WIRE_HELLO_FRAME + COMM_WIRE_ABORT_REASON_MAX);
    /* Follow the parser's requests as a socket reader would. */
    size_t at = 1;
    for (;;) {
        size_t n;
        int part = parse(which, nranks, b, at, &n);
        if (part < 0) {
            CHECK(whole < 0);
            break;
        }
        if (part > 0) {
            CHECK(whole > 0); /* bytes after a whole frame change nothing */
            break;
        }
        if (at + n > len) {
            CHECK(whole <= 0);
            break;
        }
        at += n;
    }
    /* A peer that sends the rest as zeros: the frame ends, complete or
     * refused, within a few requests (a header, the fixed part, the body). */
    for (int k = 0; whole == 0 && k < 4; k++) {
        unsigned char *more = realloc(b, len + need);
        if (!more)
            break;
        b = more;
        memset(b + len, 0, need);
        len += need;
        whole = parse(which, nranks, b, len, &need);
    }
    CHECK(whole != 0);
    free(b);
    return 0;
}
