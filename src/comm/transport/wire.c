/*
 * Parsers and packers of the frames in wire.h. No I/O here: the callers
 * read sockets, these judge bytes, so a fuzzer and unit tests can feed
 * them anything.
 */
#include "comm/transport/wire.h"

#include <string.h>

static uint32_t rd32(const unsigned char *b)
{
    uint32_t v;
    memcpy(&v, b, 4);
    return v;
}

static uint16_t rd16(const unsigned char *b)
{
    uint16_t v;
    memcpy(&v, b, 2);
    return v;
}

static uint64_t rd64(const unsigned char *b)
{
    uint64_t v;
    memcpy(&v, b, 8);
    return v;
}

/* The first min(len, 4) bytes must be a prefix of `magic`. */
static int magic_prefix_ok(const unsigned char *b, size_t len, uint32_t magic)
{
    unsigned char m[4];
    memcpy(m, &magic, 4);
    return memcmp(b, m, len < 4 ? len : 4) == 0;
}

static ai_status_t more(size_t have, size_t want, size_t *need)
{
    *need = want - have;
    return AI_OK;
}

/* The magic and version that open every frame, judged as their bytes
 * arrive; *need > 0 until the first hdr bytes are in. */
static ai_status_t lead_parse(const unsigned char *b, size_t len, uint32_t magic, size_t hdr,
                              const char *not_magic, size_t *need)
{
    *need = 0;
    if (!magic_prefix_ok(b, len, magic))
        return util_fail(AI_ERR_PROTO, "%s", not_magic);
    if (len >= 6 && rd16(b + 4) != COMM_PROTO_VERSION)
        return util_fail(AI_ERR_PROTO, "wrong protocol version %u (this build speaks %d)",
                         (unsigned)rd16(b + 4), COMM_PROTO_VERSION);
    return len < hdr ? more(len, hdr, need) : AI_OK;
}

/* n bytes of text at b + at, at most max: into out, NUL-terminated. */
static ai_status_t text_parse(const unsigned char *b, size_t len, size_t at, size_t n, size_t max,
                              const char *what, char *out, size_t *need)
{
    if (n > max)
        return util_fail(AI_ERR_PROTO, "%s of %zu bytes (at most %zu)", what, n, max);
    if (len < at + n)
        return more(len, at + n, need);
    memcpy(out, b + at, n);
    out[n] = '\0';
    *need = 0;
    return AI_OK;
}

/* The 12-byte header of store and fault-tolerance frames: magic |
 * version u16 | type u16 | body length u32. */
static void hdr12_pack(unsigned char *b, uint32_t magic, uint16_t type, uint32_t len)
{
    uint16_t version = COMM_PROTO_VERSION;
    memcpy(b, &magic, 4);
    memcpy(b + 4, &version, 2);
    memcpy(b + 6, &type, 2);
    memcpy(b + 8, &len, 4);
}

void comm_wire_hdr_pack(unsigned char *b, uint16_t type, uint32_t len)
{
    hdr12_pack(b, COMM_WIRE_STORE_MAGIC, type, len);
}

static ai_status_t hdr12_parse(const unsigned char *b, size_t len, uint32_t magic,
                               const char *not_magic, uint16_t *type, uint32_t *body_len,
                               size_t *need)
{
    ai_status_t st = lead_parse(b, len, magic, 12, not_magic, need);
    if (st != AI_OK || *need)
        return st;
    *type = rd16(b + 6);
    *body_len = rd32(b + 8);
    return AI_OK;
}

ai_status_t comm_wire_hdr_parse(const unsigned char *b, size_t len, uint16_t *type,
                                uint32_t *body_len, size_t *need)
{
    return hdr12_parse(b, len, COMM_WIRE_STORE_MAGIC, "not an autoinfra peer (malformed frame)",
                       type, body_len, need);
}

/* The header of an answer that may be a refusal (the rank table, the
 * join answer): *type and *body once the header is whole; a REJECT
 * frame's reason goes into why, and *rejected is 1 once it is whole. */
static ai_status_t answer_hdr_parse(const unsigned char *b, size_t len, uint16_t *type,
                                    uint32_t *body, char *why, int *rejected, size_t *need)
{
    *rejected = 0;
    ai_status_t st = comm_wire_hdr_parse(b, len, type, body, need);
    if (st != AI_OK || *need || *type != COMM_WIRE_REJECT)
        return st;
    st = text_parse(b, len, COMM_WIRE_HDR, *body, COMM_WIRE_REASON_MAX, "refusal", why, need);
    *rejected = st == AI_OK && !*need;
    return st;
}

void comm_wire_entry_pack(unsigned char *b, const comm_rank_info *e)
{
    uint16_t pad = 0;
    memcpy(b, &e->addr, 4);
    memcpy(b + 4, &e->port, 2);
    memcpy(b + 6, &pad, 2);
    memcpy(b + 8, &e->pid, 4);
    memcpy(b + 12, &e->machine, 8);
    memcpy(b + 20, e->host, COMM_HOST_MAX);
}

void comm_wire_entry_unpack(const unsigned char *b, comm_rank_info *e)
{
    memcpy(&e->addr, b, 4);
    memcpy(&e->port, b + 4, 2);
    memcpy(&e->pid, b + 8, 4);
    memcpy(&e->machine, b + 12, 8);
    memcpy(e->host, b + 20, COMM_HOST_MAX);
    e->host[COMM_HOST_MAX - 1] = '\0';
}

void comm_wire_hello_pack(unsigned char *b, uint32_t rank, uint32_t size,
                          const unsigned char nonce[COMM_WIRE_NONCE], const comm_rank_info *self)
{
    comm_wire_hdr_pack(b, COMM_WIRE_HELLO, COMM_WIRE_HELLO_BODY);
    memcpy(b + COMM_WIRE_HDR, &rank, 4);
    memcpy(b + COMM_WIRE_HDR + 4, &size, 4);
    memcpy(b + COMM_WIRE_HDR + 8, nonce, COMM_WIRE_NONCE);
    comm_wire_entry_pack(b + COMM_WIRE_HDR + 8 + COMM_WIRE_NONCE, self);
}

ai_status_t comm_wire_hello_parse(const unsigned char *b, size_t len, comm_wire_hello *out,
                                  size_t *need)
{
    uint16_t type;
    uint32_t body;
    ai_status_t st = comm_wire_hdr_parse(b, len, &type, &body, need);
    if (st != AI_OK || *need)
        return st;
    if (type != COMM_WIRE_HELLO || body != COMM_WIRE_HELLO_BODY)
        return util_fail(AI_ERR_PROTO, "malformed hello frame");
    if (len < COMM_WIRE_HELLO_FRAME)
        return more(len, COMM_WIRE_HELLO_FRAME, need);
    out->rank = rd32(b + COMM_WIRE_HDR);
    out->size = rd32(b + COMM_WIRE_HDR + 4);
    comm_wire_entry_unpack(b + COMM_WIRE_HDR + 8 + COMM_WIRE_NONCE, &out->entry);
    *need = 0;
    return AI_OK;
}

ai_status_t comm_wire_reply_parse(const unsigned char *b, size_t len, uint32_t size,
                                  comm_rank_info *table, char *why, int *rejected, size_t *need)
{
    uint16_t type;
    uint32_t body;
    ai_status_t st = answer_hdr_parse(b, len, &type, &body, why, rejected, need);
    if (st != AI_OK || *need || *rejected)
        return st;
    if (type != COMM_WIRE_TABLE || size == 0 || size > COMM_WIRE_MAX_RANKS ||
        body != size * (uint32_t)COMM_WIRE_ENTRY)
        return util_fail(AI_ERR_PROTO, "malformed rank table (type %u, %u bytes for %u ranks)",
                         (unsigned)type, (unsigned)body, (unsigned)size);
    if (len < COMM_WIRE_HDR + (size_t)body)
        return more(len, COMM_WIRE_HDR + (size_t)body, need);
    for (uint32_t r = 0; r < size; r++)
        comm_wire_entry_unpack(b + COMM_WIRE_HDR + (size_t)r * COMM_WIRE_ENTRY, &table[r]);
    *need = 0;
    return AI_OK;
}

void comm_wire_data_hello_pack(unsigned char *b, const unsigned char nonce[COMM_WIRE_NONCE],
                               uint32_t from, uint32_t to, uint16_t chan)
{
    uint32_t magic = COMM_WIRE_DATA_MAGIC;
    uint16_t version = COMM_PROTO_VERSION;
    memcpy(b, &magic, 4);
    memcpy(b + 4, &version, 2);
    memcpy(b + 6, &chan, 2);
    memcpy(b + 8, &from, 4);
    memcpy(b + 12, &to, 4);
    memcpy(b + 16, nonce, COMM_WIRE_NONCE);
}

ai_status_t comm_wire_data_hello_parse(const unsigned char *b, size_t len, uint32_t *from,
                                       uint32_t *to, uint16_t *chan, size_t *need)
{
    ai_status_t st = lead_parse(b, len, COMM_WIRE_DATA_MAGIC, COMM_WIRE_DATA_HELLO,
                                "not an autoinfra peer (bad magic)", need);
    if (st != AI_OK || *need)
        return st;
    *chan = rd16(b + 6);
    *from = rd32(b + 8);
    *to = rd32(b + 12);
    *need = 0;
    return AI_OK;
}

/* magic | version u16 | pad u16: the 8 bytes that open a challenge and a proof. */
static void lead8_pack(unsigned char *b, uint32_t magic)
{
    uint16_t version = COMM_PROTO_VERSION, pad = 0;
    memcpy(b, &magic, 4);
    memcpy(b + 4, &version, 2);
    memcpy(b + 6, &pad, 2);
}

void comm_wire_challenge_pack(unsigned char *b, const unsigned char nonce[COMM_WIRE_NONCE],
                              const unsigned char mac[COMM_WIRE_MAC])
{
    lead8_pack(b, COMM_WIRE_CHALLENGE_MAGIC);
    memcpy(b + 8, nonce, COMM_WIRE_NONCE);
    memcpy(b + 8 + COMM_WIRE_NONCE, mac, COMM_WIRE_MAC);
}

ai_status_t comm_wire_challenge_parse(const unsigned char *b, size_t len,
                                      unsigned char nonce[COMM_WIRE_NONCE],
                                      unsigned char mac[COMM_WIRE_MAC], size_t *need)
{
    ai_status_t st = lead_parse(b, len, COMM_WIRE_CHALLENGE_MAGIC, COMM_WIRE_CHALLENGE,
                                "not an autoinfra peer (no challenge)", need);
    if (st != AI_OK || *need)
        return st;
    memcpy(nonce, b + 8, COMM_WIRE_NONCE);
    memcpy(mac, b + 8 + COMM_WIRE_NONCE, COMM_WIRE_MAC);
    return AI_OK;
}

void comm_wire_proof_pack(unsigned char *b, const unsigned char mac[COMM_WIRE_MAC])
{
    lead8_pack(b, COMM_WIRE_PROOF_MAGIC);
    memcpy(b + 8, mac, COMM_WIRE_MAC);
}

ai_status_t comm_wire_proof_parse(const unsigned char *b, size_t len,
                                  unsigned char mac[COMM_WIRE_MAC], size_t *need)
{
    ai_status_t st = lead_parse(b, len, COMM_WIRE_PROOF_MAGIC, COMM_WIRE_PROOF,
                                "malformed proof (bad magic)", need);
    if (st != AI_OK || *need)
        return st;
    memcpy(mac, b + 8, COMM_WIRE_MAC);
    return AI_OK;
}

size_t comm_wire_abort_pack(unsigned char *b, int32_t origin, int revoked, const char *reason)
{
    uint32_t magic = revoked ? COMM_WIRE_REVOKE_MAGIC : COMM_WIRE_ABORT_MAGIC;
    uint16_t version = COMM_PROTO_VERSION;
    size_t n = strlen(reason);
    if (n > COMM_WIRE_ABORT_REASON_MAX)
        n = COMM_WIRE_ABORT_REASON_MAX;
    uint16_t len = (uint16_t)n;
    memcpy(b, &magic, 4);
    memcpy(b + 4, &version, 2);
    memcpy(b + 6, &len, 2);
    memcpy(b + 8, &origin, 4);
    memcpy(b + COMM_WIRE_ABORT_HDR, reason, n);
    return COMM_WIRE_ABORT_HDR + n;
}

ai_status_t comm_wire_abort_parse(const unsigned char *b, size_t len, int32_t *origin,
                                  int *revoked, char *reason, size_t *need)
{
    /* "AIAB" and "AIRV" part at their third byte. */
    int rv = len >= 3 && b[2] == (unsigned char)'R';
    ai_status_t st = lead_parse(b, len, rv ? COMM_WIRE_REVOKE_MAGIC : COMM_WIRE_ABORT_MAGIC,
                                COMM_WIRE_ABORT_HDR, "malformed abort notice (bad magic)", need);
    if (st != AI_OK || *need)
        return st;
    st = text_parse(b, len, COMM_WIRE_ABORT_HDR, rd16(b + 6), COMM_WIRE_ABORT_REASON_MAX,
                    "abort notice reason", reason, need);
    if (st == AI_OK && !*need) {
        *origin = (int32_t)rd32(b + 8);
        *revoked = rv;
    }
    return st;
}

void comm_wire_ft_hdr_pack(unsigned char *b, uint16_t kind, uint32_t body_len)
{
    hdr12_pack(b, COMM_WIRE_FT_MAGIC, kind, body_len);
}

ai_status_t comm_wire_ft_hdr_parse(const unsigned char *b, size_t len, uint16_t *kind,
                                   uint32_t *body_len, size_t *need)
{
    ai_status_t st = hdr12_parse(b, len, COMM_WIRE_FT_MAGIC, "malformed control frame (bad magic)",
                                 kind, body_len, need);
    if (st == AI_OK && !*need && *body_len > COMM_WIRE_FT_MAX_BODY)
        return util_fail(AI_ERR_PROTO, "control frame of %u bytes (at most %u)", *body_len,
                         COMM_WIRE_FT_MAX_BODY);
    return st;
}

size_t comm_wire_joined_pack(unsigned char *b, const comm_wire_joined *j,
                             const comm_rank_info *table)
{
    size_t body = COMM_WIRE_JOINED_FIXED + (size_t)j->size * COMM_WIRE_ENTRY;
    comm_wire_hdr_pack(b, COMM_WIRE_JOINED, (uint32_t)body);
    unsigned char *p = b + COMM_WIRE_HDR;
    memcpy(p, &j->rank, 4);
    memcpy(p + 4, &j->size, 4);
    memcpy(p + 8, &j->nonce, 8);
    memcpy(p + 16, &j->channels, 4);
    memcpy(p + 20, &j->no_shm, 4);
    for (uint32_t i = 0; i < j->size; i++)
        comm_wire_entry_pack(p + COMM_WIRE_JOINED_FIXED + (size_t)i * COMM_WIRE_ENTRY, &table[i]);
    return COMM_WIRE_HDR + body;
}

ai_status_t comm_wire_joined_parse(const unsigned char *b, size_t len, uint32_t max_size,
                                   comm_wire_joined *j, comm_rank_info *table, char *why,
                                   int *rejected, size_t *need)
{
    uint16_t type;
    uint32_t body;
    ai_status_t st = answer_hdr_parse(b, len, &type, &body, why, rejected, need);
    if (st != AI_OK || *need || *rejected)
        return st;
    if (type != COMM_WIRE_JOINED)
        return util_fail(AI_ERR_PROTO, "join answered with frame type %u", (unsigned)type);
    if (body < COMM_WIRE_JOINED_FIXED)
        return util_fail(AI_ERR_PROTO, "join answer of %u bytes", body);
    if (len < COMM_WIRE_HDR + COMM_WIRE_JOINED_FIXED)
        return more(len, COMM_WIRE_HDR + COMM_WIRE_JOINED_FIXED, need);
    const unsigned char *p = b + COMM_WIRE_HDR;
    uint32_t r = rd32(p), n = rd32(p + 4), ch = rd32(p + 16), ns = rd32(p + 20);
    if (n < 2 || n > max_size || r >= n ||
        body != COMM_WIRE_JOINED_FIXED + (uint64_t)n * COMM_WIRE_ENTRY)
        return util_fail(AI_ERR_PROTO, "join answer with rank %u of %u ranks (%u bytes)", r, n, body);
    if (ch < 1 || ch > COMM_MAX_CHANNELS || ns > 1)
        return util_fail(AI_ERR_PROTO, "join answer with %u channels, no_shm %u", ch, ns);
    if (len < COMM_WIRE_HDR + body)
        return more(len, COMM_WIRE_HDR + body, need);
    for (uint32_t i = 0; i < n; i++)
        comm_wire_entry_unpack(p + COMM_WIRE_JOINED_FIXED + (size_t)i * COMM_WIRE_ENTRY, &table[i]);
    *j = (comm_wire_joined){.rank = r, .size = n, .nonce = rd64(p + 8), .channels = ch,
                            .no_shm = ns};
    *need = 0;
    return AI_OK;
}
