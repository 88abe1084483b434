// formats/torch_file.c: torch.save files, zip and legacy (see torch_file.h).
//
// The zip layout is PKWARE's APPNOTE (end of central directory, ZIP64 locator and record,
// central directory, local headers; ZIP64 extra field 0x0001) as torch's PyTorchStreamWriter
// (miniz) writes it: every entry stored, not compressed. The legacy layout follows
// torch/serialization.py _legacy_load. data.pkl's CRC-32 is checked; the storages' are not
// (that would read every weight twice).
#include "torch_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "../common/check.h"
#include "../common/file_open.h"
#include "../common/half.h"
#include "../common/hash_index.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "formats/torch_file.c: big-endian hosts are not supported (torch writes little-endian storages)"
#endif

// ---- zip records (APPNOTE.TXT 4.3) ------------------------------------------------------
#define ZIP_LOCAL_SIG 0x04034b50u
#define ZIP_CENTRAL_SIG 0x02014b50u
#define ZIP_EOCD_SIG 0x06054b50u
#define ZIP64_LOCATOR_SIG 0x07064b50u
#define ZIP64_EOCD_SIG 0x06064b50u
#define ZIP_EOCD_SIZE 22
#define ZIP_MAX_COMMENT 65535
#define ZIP64_LOCATOR_SIZE 20
#define ZIP64_EOCD_SIZE 56
#define ZIP_CENTRAL_SIZE 46
#define ZIP_LOCAL_SIZE 30
#define ZIP64_EXTRA_ID 0x0001
#define ZIP_METHOD_STORED 0
#define ZIP_U16_MAX 0xffffu
#define ZIP_U32_MAX 0xffffffffu

// ---- legacy format (torch/serialization.py) ----------------------------------------------
// pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2): PROTO 2, LONG1 of 10 bytes, STOP
static const unsigned char LEGACY_MAGIC[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                             0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e};
#define LEGACY_PROTOCOL_VERSION 1001
#define LEGACY_NUMEL_BYTES 8  // each storage: int64 element count, then the bytes

#define HINT_TORCH "HINT: a whole file written by torch.save (re-download or re-save it)"
#define READ_CHUNK_ELEMS (1u << 18)

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const unsigned char *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

// Reads n bytes at offset, or fails naming what was being read.
static void read_at(const TorchFile *tf, uint64_t off, void *dst, size_t n, const char *what) {
    if (fseeko(tf->f, (off_t)off, SEEK_SET) != 0 || fread(dst, 1, n, tf->f) != n)
        t5_fail("%s: cannot read %s (%zu bytes at offset %llu): %s; %s", tf->path, what, n, (unsigned long long)off,
                ferror(tf->f) ? strerror(errno) : "end of file: the file is truncated", HINT_TORCH);
}

// zlib's CRC-32 (the zip checksum), bytewise.
static uint32_t crc32_update(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

// ---- zip -------------------------------------------------------------------------------

typedef struct {
    char *name;
    uint64_t size;         // uncompressed = compressed (stored)
    uint64_t local_off;    // local header
    uint32_t crc;
    int method;
} ZipEntry;

typedef struct {
    ZipEntry *e;
    uint64_t n;
    HashIndex index;  // entries by the hash of their lower-cased name
} ZipDir;

// miniz (torch's zip reader) finds names without regard to ASCII case: the index is by the
// lower-cased name, so that two names that differ only in case are found to collide.
static uint64_t zip_name_hash(const char *name) {
    size_t n = strlen(name);
    char *low = mallocCheck(n + 1);
    for (size_t i = 0; i < n; i++) low[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a' : name[i]);
    uint64_t h = hash_bytes(low, n);
    free(low);
    return h;
}

// The central directory: its offset, size and entry count, from the end record (ZIP64 when
// the classic fields are saturated or a ZIP64 locator precedes it).
static void zip_find_directory(const TorchFile *tf, uint64_t fsize, uint64_t *cd_off, uint64_t *cd_size,
                               uint64_t *count) {
    uint64_t tail = fsize < ZIP_EOCD_SIZE + ZIP_MAX_COMMENT ? fsize : ZIP_EOCD_SIZE + ZIP_MAX_COMMENT;
    unsigned char *buf = mallocCheck(tail);
    read_at(tf, fsize - tail, buf, tail, "the zip's end");
    int64_t at = -1;
    for (int64_t i = (int64_t)tail - ZIP_EOCD_SIZE; i >= 0 && at < 0; i--)
        if (rd32(buf + i) == ZIP_EOCD_SIG) at = i;
    if (at < 0)
        t5_fail("%s: a zip without an end-of-central-directory record: truncated or not a torch.save file; %s",
                tf->path, HINT_TORCH);
    const unsigned char *e = buf + at;
    uint64_t eocd = fsize - tail + (uint64_t)at;
    *count = rd16(e + 10);
    *cd_size = rd32(e + 12);
    *cd_off = rd32(e + 16);
    int zip64 = *count == ZIP_U16_MAX || *cd_size == ZIP_U32_MAX || *cd_off == ZIP_U32_MAX;
    unsigned char loc[ZIP64_LOCATOR_SIZE];
    if (eocd >= ZIP64_LOCATOR_SIZE) {
        read_at(tf, eocd - ZIP64_LOCATOR_SIZE, loc, sizeof loc, "the ZIP64 locator");
        zip64 |= rd32(loc) == ZIP64_LOCATOR_SIG;
    }
    if (zip64) {
        if (eocd < ZIP64_LOCATOR_SIZE || rd32(loc) != ZIP64_LOCATOR_SIG)
            t5_fail("%s: ZIP64 sizes without a ZIP64 locator: a damaged zip; %s", tf->path, HINT_TORCH);
        uint64_t off = rd64(loc + 8);
        unsigned char r[ZIP64_EOCD_SIZE];
        if (fsize < ZIP64_EOCD_SIZE || off > fsize - ZIP64_EOCD_SIZE)
            t5_fail("%s: the ZIP64 end record offset %llu is outside the file: a damaged zip; %s", tf->path,
                    (unsigned long long)off, HINT_TORCH);
        read_at(tf, off, r, sizeof r, "the ZIP64 end record");
        if (rd32(r) != ZIP64_EOCD_SIG) t5_fail("%s: no ZIP64 end record where the locator points: a damaged zip; %s", tf->path, HINT_TORCH);
        *count = rd64(r + 32);
        *cd_size = rd64(r + 40);
        *cd_off = rd64(r + 48);
    }
    free(buf);
    if (*cd_off > fsize || *cd_size > fsize - *cd_off)
        t5_fail("%s: the central directory [%llu, +%llu) is outside the file (%llu bytes): truncated; %s", tf->path,
                (unsigned long long)*cd_off, (unsigned long long)*cd_size, (unsigned long long)fsize, HINT_TORCH);
}

static void zip_read_directory(const TorchFile *tf, uint64_t fsize, ZipDir *zd) {
    uint64_t cd_off, cd_size, count;
    zip_find_directory(tf, fsize, &cd_off, &cd_size, &count);
    if (count > cd_size / ZIP_CENTRAL_SIZE)
        t5_fail("%s: %llu entries cannot fit a %llu-byte central directory: a damaged zip; %s", tf->path,
                (unsigned long long)count, (unsigned long long)cd_size, HINT_TORCH);
    unsigned char *cd = mallocCheck(cd_size ? cd_size : 1);
    read_at(tf, cd_off, cd, cd_size, "the zip's central directory");
    zd->e = callocCheck(count ? count : 1, sizeof *zd->e);
    zd->n = count;
    uint64_t p = 0;
    for (uint64_t i = 0; i < count; i++) {
        if (p + ZIP_CENTRAL_SIZE > cd_size || rd32(cd + p) != ZIP_CENTRAL_SIG)
            t5_fail("%s: central directory entry %llu is damaged; %s", tf->path, (unsigned long long)i, HINT_TORCH);
        const unsigned char *h = cd + p;
        ZipEntry *z = &zd->e[i];
        z->method = rd16(h + 10);
        z->crc = rd32(h + 16);
        uint64_t csize = rd32(h + 20), usize = rd32(h + 24);
        unsigned nlen = rd16(h + 28), xlen = rd16(h + 30), clen = rd16(h + 32);
        z->local_off = rd32(h + 42);
        if (p + ZIP_CENTRAL_SIZE + nlen + xlen + clen > cd_size)
            t5_fail("%s: central directory entry %llu runs past the directory; %s", tf->path, (unsigned long long)i, HINT_TORCH);
        if (memchr(h + ZIP_CENTRAL_SIZE, '\0', nlen))
            t5_fail("%s: central directory entry %llu has a NUL byte in its name: a damaged zip; %s", tf->path,
                    (unsigned long long)i, HINT_TORCH);
        z->name = mallocCheck(nlen + 1u);
        memcpy(z->name, h + ZIP_CENTRAL_SIZE, nlen);
        z->name[nlen] = '\0';
        uint64_t nh = zip_name_hash(z->name);
        HashProbe probe;
        for (size_t k = hidx_first(&zd->index, nh, &probe); k != SIZE_MAX; k = hidx_next(&probe))
            if (!strcasecmp(zd->e[k].name, z->name))
                t5_fail("%s: two zip entries are named \"%s\" and \"%s\" (torch's zip reader ignores case): which one "
                        "it reads is not defined; %s", tf->path, zd->e[k].name, z->name, HINT_TORCH);
        hidx_add(&zd->index, nh, (size_t)i);
        // ZIP64 extra: the saturated fields, in the order usize, csize, local offset
        const unsigned char *x = h + ZIP_CENTRAL_SIZE + nlen, *xe = x + xlen;
        while (x + 4 <= xe) {
            unsigned id = rd16(x), len = rd16(x + 2);
            if (x + 4 + len > xe) break;
            if (id == ZIP64_EXTRA_ID) {
                const unsigned char *v = x + 4, *ve = v + len;
                if (usize == ZIP_U32_MAX && v + 8 <= ve) usize = rd64(v), v += 8;
                if (csize == ZIP_U32_MAX && v + 8 <= ve) csize = rd64(v), v += 8;
                if (z->local_off == ZIP_U32_MAX && v + 8 <= ve) z->local_off = rd64(v), v += 8;
            }
            x += 4 + len;
        }
        if (usize == ZIP_U32_MAX || csize == ZIP_U32_MAX || z->local_off == ZIP_U32_MAX)
            t5_fail("%s: entry \"%s\" has ZIP64 sizes but no ZIP64 extra field: a damaged zip; %s", tf->path, z->name, HINT_TORCH);
        if (z->method == ZIP_METHOD_STORED && csize != usize)
            t5_fail("%s: stored entry \"%s\" has sizes %llu and %llu: a damaged zip; %s", tf->path, z->name,
                    (unsigned long long)csize, (unsigned long long)usize, HINT_TORCH);
        z->size = usize;
        p += ZIP_CENTRAL_SIZE + nlen + xlen + clen;
    }
    free(cd);
}

static const ZipEntry *zip_find(const ZipDir *zd, const char *name) {
    HashProbe probe;
    for (size_t k = hidx_first(&zd->index, zip_name_hash(name), &probe); k != SIZE_MAX; k = hidx_next(&probe))
        if (!strcmp(zd->e[k].name, name)) return &zd->e[k];
    return NULL;
}

// prefix (plen bytes, with its '/') + rest, malloc'd: a storage key of any length.
static char *zip_member(const char *prefix, size_t plen, const char *rest) {
    size_t n = strlen(rest);
    char *s = mallocCheck(plen + n + 1);
    memcpy(s, prefix, plen);
    memcpy(s + plen, rest, n + 1);
    return s;
}

// The file offset of an entry's bytes (after its local header), checked to be inside the file.
static uint64_t zip_data_offset(const TorchFile *tf, const ZipEntry *z, uint64_t fsize) {
    if (z->method != ZIP_METHOD_STORED)
        t5_fail("%s: entry \"%s\" is compressed (method %d); torch.save stores entries uncompressed; %s", tf->path,
                z->name, z->method, HINT_TORCH);
    unsigned char h[ZIP_LOCAL_SIZE];
    if (z->local_off > fsize - ZIP_LOCAL_SIZE || fsize < ZIP_LOCAL_SIZE)
        t5_fail("%s: entry \"%s\": local header offset %llu outside the file: truncated; %s", tf->path, z->name,
                (unsigned long long)z->local_off, HINT_TORCH);
    read_at(tf, z->local_off, h, sizeof h, "a zip local header");
    if (rd32(h) != ZIP_LOCAL_SIG)
        t5_fail("%s: entry \"%s\": no local header at offset %llu: a damaged zip; %s", tf->path, z->name,
                (unsigned long long)z->local_off, HINT_TORCH);
    uint64_t off = z->local_off + ZIP_LOCAL_SIZE + rd16(h + 26) + rd16(h + 28);
    if (off > fsize || z->size > fsize - off)
        t5_fail("%s: entry \"%s\" ([%llu, +%llu)) runs past the end of the file (%llu bytes): truncated; %s", tf->path,
                z->name, (unsigned long long)off, (unsigned long long)z->size, (unsigned long long)fsize, HINT_TORCH);
    return off;
}

static TorchStorageRec *storage_find(const TorchFile *tf, const char *key) {
    HashProbe probe;
    for (size_t k = hidx_first(&tf->storage_index, hash_bytes(key, strlen(key)), &probe); k != SIZE_MAX;
         k = hidx_next(&probe))
        if (!strcmp(tf->storages[k].key, key)) return &tf->storages[k];
    return NULL;
}

// One record per storage key the pickle names. torch keeps the first storage of a key and
// builds every later tensor of that key over it: ids of one key that disagree on the type or
// the size would be read differently here, so they are refused (torch.save never writes them).
static void storages_collect(TorchFile *tf, const char *where) {
    int cap = 0;
    for (size_t i = 0; i < tf->arena.n; i++) {
        const PkValue *s = tf->arena.all[i];
        if (s->kind != PK_STORAGE) continue;
        if (!tf->legacy && s->legacy_id)
            t5_fail("%s: %s names storage \"%s\" with a 6-item persistent id (the legacy format's): torch's zip "
                    "loader refuses it; %s", tf->path, where, s->s, HINT_TORCH);
        TorchStorageRec *r = storage_find(tf, s->s);
        if (r) {
            if (r->dtype != s->dtype || r->numel != s->root_numel)
                t5_fail("%s: %s names storage \"%s\" as %llu %s elements and as %llu %s elements: torch reads one "
                        "storage per key; %s", tf->path, where, s->s, (unsigned long long)r->numel,
                        torch_dtype_name(r->dtype), (unsigned long long)s->root_numel, torch_dtype_name(s->dtype),
                        HINT_TORCH);
            continue;
        }
        if (tf->nstorages == cap) {
            cap = cap ? 2 * cap : 64;
            tf->storages = reallocCheck(tf->storages, (size_t)cap * sizeof *tf->storages);
        }
        r = &tf->storages[tf->nstorages];
        memset(r, 0, sizeof *r);
        r->key = strdup(s->s);
        if (!r->key) t5_die(__FILE__, __LINE__, "out of host memory", NULL);
        r->dtype = s->dtype;
        r->numel = s->root_numel;
        r->bytes = s->root_numel * (uint64_t)torch_dtype_size(s->dtype);  // no overflow: the VM checked
        hidx_add(&tf->storage_index, hash_bytes(s->s, strlen(s->s)), (size_t)tf->nstorages++);
    }
}

static void zip_open(TorchFile *tf, uint64_t fsize) {
    ZipDir zd = {0};
    zip_read_directory(tf, fsize, &zd);
    // PREFIX: the folder of the zip's first entry, as torch's PyTorchStreamReader takes it
    if (!zd.n) t5_fail("%s: a zip without entries: not a torch.save file; %s", tf->path, HINT_TORCH);
    const char *slash = strchr(zd.e[0].name, '/');
    if (!slash)
        t5_fail("%s: the zip's first entry \"%s\" is not in a folder (torch reads PREFIX/data.pkl, PREFIX being the "
                "first entry's folder): not a torch.save file; %s", tf->path, zd.e[0].name, HINT_TORCH);
    size_t plen = (size_t)(slash - zd.e[0].name) + 1;
    char *pkl_name = zip_member(zd.e[0].name, plen, "data.pkl"), *bo_name = zip_member(zd.e[0].name, plen, "byteorder");
    const ZipEntry *pkl = zip_find(&zd, pkl_name);
    if (!pkl)
        t5_fail("%s: a zip without %s (PREFIX/data.pkl, PREFIX being the first entry's folder): not a torch.save "
                "file; %s", tf->path, pkl_name, HINT_TORCH);
    const ZipEntry *bo = zip_find(&zd, bo_name);
    if (bo) {  // torch >= 2.1 records the byte order; older files are little-endian
        char order[8] = "";
        if (bo->size >= sizeof order) t5_fail("%s: %s is not \"little\" or \"big\"", tf->path, bo_name);
        read_at(tf, zip_data_offset(tf, bo, fsize), order, (size_t)bo->size, bo_name);
        if (strcmp(order, "little") != 0)
            t5_fail("%s: %s says \"%s\": only little-endian storages are supported", tf->path, bo_name, order);
    }
    // data.pkl: checksum, then the pickle
    uint64_t at = zip_data_offset(tf, pkl, fsize);
    unsigned char *buf = mallocCheck(1u << 16);
    uint32_t crc = 0;
    for (uint64_t done = 0; done < pkl->size;) {
        size_t n = pkl->size - done < (1u << 16) ? (size_t)(pkl->size - done) : (1u << 16);
        read_at(tf, at + done, buf, n, pkl->name);
        crc = crc32_update(crc, buf, n);
        done += n;
    }
    free(buf);
    if (crc != pkl->crc)
        t5_fail("%s: %s fails its CRC-32 check (0x%08x, the zip says 0x%08x): the file is damaged; %s", tf->path,
                pkl->name, crc, pkl->crc, HINT_TORCH);
    uint64_t stop;
    tf->root = pk_load(&tf->arena, tf->f, tf->path, pkl->name, at, at + pkl->size, &stop);
    // every storage the pickle names: PREFIX/data/KEY, holding exactly its bytes (torch's
    // getRecord checks the record's size against numel * element size)
    storages_collect(tf, pkl->name);
    for (int i = 0; i < tf->nstorages; i++) {
        TorchStorageRec *r = &tf->storages[i];
        char *rest = zip_member("data/", 5, r->key), *name = zip_member(zd.e[0].name, plen, rest);
        const ZipEntry *z = zip_find(&zd, name);
        if (!z)
            t5_fail("%s: storage \"%s\" named by %s is missing (no entry \"%s\"): the file is damaged; %s", tf->path,
                    r->key, pkl->name, name, HINT_TORCH);
        if (z->size != r->bytes)
            t5_fail("%s: storage \"%s\": entry \"%s\" holds %llu bytes, %s says %llu %s elements (%llu bytes): the "
                    "file is damaged; %s", tf->path, r->key, name, (unsigned long long)z->size, pkl->name,
                    (unsigned long long)r->numel, torch_dtype_name(r->dtype), (unsigned long long)r->bytes, HINT_TORCH);
        r->offset = zip_data_offset(tf, z, fsize);
        r->found = 1;
        free(rest);
        free(name);
    }
    free(pkl_name);
    free(bo_name);
    for (uint64_t i = 0; i < zd.n; i++) free(zd.e[i].name);
    free(zd.e);
    hidx_free(&zd.index);
}

// ---- legacy ----------------------------------------------------------------------------

static void legacy_open(TorchFile *tf, uint64_t fsize) {
    uint64_t pos = sizeof LEGACY_MAGIC, next;
    const PkValue *ver = pk_load(&tf->arena, tf->f, tf->path, "(protocol version)", pos, fsize, &next);
    if (ver->kind != PK_INT || ver->i != LEGACY_PROTOCOL_VERSION)
        t5_fail("%s: legacy torch file with protocol version %lld (expected %d); %s", tf->path,
                ver->kind == PK_INT ? (long long)ver->i : -1LL, LEGACY_PROTOCOL_VERSION, HINT_TORCH);
    pos = next;
    const PkValue *info = pk_load(&tf->arena, tf->f, tf->path, "(sys_info)", pos, fsize, &next);
    const PkValue *le = pk_dict_get(info, "little_endian");
    if (!le || le->kind != PK_BOOL || !le->i)
        t5_fail("%s: legacy torch file written on a big-endian machine (sys_info little_endian is not True): not "
                "supported", tf->path);
    pos = next;
    tf->root = pk_load(&tf->arena, tf->f, tf->path, "(main)", pos, fsize, &next);
    storages_collect(tf, "pickle (main)");
    pos = next;
    const PkValue *keys = pk_load(&tf->arena, tf->f, tf->path, "(storage keys)", pos, fsize, &next);
    if (keys->kind != PK_LIST) t5_fail("%s: the storage key list is a %s, not a list; %s", tf->path, pk_kind_name(keys->kind), HINT_TORCH);
    pos = next;
    // each storage: its int64 element count, which must be the pickled one (torch's
    // _set_from_file: "storage has wrong byte size"), then its bytes
    for (int i = 0; i < keys->n; i++) {
        const PkValue *k = keys->items[i];
        if (k->kind != PK_STR) t5_fail("%s: storage key %d is a %s, not a str; %s", tf->path, i, pk_kind_name(k->kind), HINT_TORCH);
        TorchStorageRec *r = storage_find(tf, k->s);
        if (!r) t5_fail("%s: storage \"%s\" is listed but no tensor uses it: the file is damaged; %s", tf->path, k->s, HINT_TORCH);
        if (r->found)
            t5_fail("%s: storage \"%s\" is listed twice (torch would read the second copy over the first): the file "
                    "is damaged; %s", tf->path, k->s, HINT_TORCH);
        unsigned char nb[LEGACY_NUMEL_BYTES];
        if (pos > fsize || fsize - pos < LEGACY_NUMEL_BYTES)
            t5_fail("%s: storage \"%s\" (%d of %d) starts past the end of the file (%llu bytes): truncated; %s",
                    tf->path, k->s, i + 1, keys->n, (unsigned long long)fsize, HINT_TORCH);
        read_at(tf, pos, nb, sizeof nb, "a storage's element count");
        uint64_t numel = rd64(nb);
        if (numel != r->numel)
            t5_fail("%s: storage \"%s\" (%d of %d) holds %llu elements, the pickle says %llu: the file is damaged; %s",
                    tf->path, k->s, i + 1, keys->n, (unsigned long long)numel, (unsigned long long)r->numel, HINT_TORCH);
        pos += LEGACY_NUMEL_BYTES;
        if (r->bytes > fsize - pos)
            t5_fail("%s: storage \"%s\" (%d of %d, %llu %s elements at offset %llu) runs past the end of the file "
                    "(%llu bytes): truncated; %s", tf->path, k->s, i + 1, keys->n, (unsigned long long)numel,
                    torch_dtype_name(r->dtype), (unsigned long long)pos, (unsigned long long)fsize, HINT_TORCH);
        r->offset = pos;
        r->found = 1;
        pos += r->bytes;
    }
    for (int i = 0; i < tf->nstorages; i++)  // every storage the pickle names is there
        if (!tf->storages[i].found)
            t5_fail("%s: storage \"%s\" is used by a tensor but missing from the storage list: the file is damaged; %s",
                    tf->path, tf->storages[i].key, HINT_TORCH);
}

// ---- public ----------------------------------------------------------------------------

void torch_file_open(TorchFile *tf, const char *path) {
    memset(tf, 0, sizeof *tf);
    tf->path = strdup(path);
    if (!tf->path) t5_die(__FILE__, __LINE__, "out of host memory", NULL);
    tf->f = file_open_regular(path, "rb", NULL);  // a FIFO or device: one line, never a wait
    if (!tf->f) t5_fail("%s: cannot open (%s)", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(tf->f), &sb) != 0) t5_fail("%s: cannot stat (%s)", path, strerror(errno));
    uint64_t fsize = (uint64_t)sb.st_size;
    unsigned char head[sizeof LEGACY_MAGIC] = {0};
    size_t got = fread(head, 1, sizeof head, tf->f);
    if (got >= 4 && rd32(head) == ZIP_LOCAL_SIG) {
        zip_open(tf, fsize);
    } else if (got == sizeof head && !memcmp(head, LEGACY_MAGIC, sizeof head)) {
        tf->legacy = 1;
        legacy_open(tf, fsize);
    } else {
        t5_fail("%s: neither a torch zip file nor a legacy torch pickle (the file is %llu bytes and starts with "
                "%02x %02x %02x %02x); %s", path, (unsigned long long)fsize, head[0], head[1], head[2], head[3],
                HINT_TORCH);
    }
}

void torch_file_close(TorchFile *tf) {
    if (tf->f) fclose(tf->f);
    pk_arena_free(&tf->arena);
    for (int i = 0; i < tf->nstorages; i++) free(tf->storages[i].key);
    free(tf->storages);
    hidx_free(&tf->storage_index);
    free(tf->path);
    memset(tf, 0, sizeof *tf);
}

static void dims_str(char *out, size_t cap, int n, const int64_t *d) {
    size_t k = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < n && k < cap; i++) k += (size_t)snprintf(out + k, cap - k, "%s%lld", i ? ", " : "", (long long)d[i]);
    if (k < cap) snprintf(out + k, cap - k, "]");
}

void torch_file_tensor(const TorchFile *tf, const PkValue *v, const char *name, TorchTensor *out) {
    if (!v || v->kind != PK_TENSOR)
        t5_fail("%s: \"%s\" is a %s, not a tensor; %s", tf->path, name, v ? pk_kind_name(v->kind) : "missing value", HINT_TORCH);
    const PkValue *s = v->storage;
    const TorchStorageRec *rec = storage_find(tf, s->s);
    if (!rec || !rec->found) t5_fail("%s: tensor \"%s\": storage \"%s\" is missing; %s", tf->path, name, s->s, HINT_TORCH);
    memset(out, 0, sizeof *out);
    out->dtype = s->dtype;
    out->ndim = v->ndim;
    out->numel = 1;
    for (int d = 0; d < v->ndim; d++) {
        out->shape[d] = v->shape[d];
        if (__builtin_mul_overflow(out->numel, (uint64_t)v->shape[d], &out->numel))
            t5_fail("%s: tensor \"%s\": its size overflows", tf->path, name);
    }
    // contiguous: each stride is the product of the sizes after it (dimensions of size 1 aside)
    uint64_t want = 1;
    for (int d = v->ndim - 1; d >= 0 && out->numel; d--) {
        if (v->shape[d] != 1 && (uint64_t)v->stride[d] != want) {
            char sz[160], st[160];
            dims_str(sz, sizeof sz, v->ndim, v->shape);
            dims_str(st, sizeof st, v->ndim, v->stride);
            t5_fail("%s: tensor \"%s\" is a non-contiguous view (size %s, stride %s): not supported; HINT: save "
                    "contiguous tensors (tensor.contiguous()) or use safetensors", tf->path, name, sz, st);
        }
        want *= (uint64_t)v->shape[d];  // at most numel: no overflow
    }
    // elements [storage_offset, +numel) of the storage (of the view, for a view), then bytes of
    // the root storage's record: every sum and product checked
    uint64_t esize = (uint64_t)torch_dtype_size(s->dtype), end, first, end_root, end_bytes;
    if (__builtin_add_overflow(v->storage_offset, out->numel, &end) || end > s->numel)
        t5_fail("%s: tensor \"%s\": elements [%llu, +%llu) are outside its storage \"%s\" of %llu elements; %s",
                tf->path, name, (unsigned long long)v->storage_offset, (unsigned long long)out->numel, s->s,
                (unsigned long long)s->numel, HINT_TORCH);
    if (__builtin_add_overflow(s->view_offset, v->storage_offset, &first) ||
        __builtin_add_overflow(first, out->numel, &end_root) || __builtin_mul_overflow(end_root, esize, &end_bytes) ||
        end_bytes > rec->bytes)
        t5_fail("%s: tensor \"%s\": elements [%llu, +%llu) of storage \"%s\" are outside the %llu bytes the file "
                "holds for it: truncated; %s", tf->path, name, (unsigned long long)first, (unsigned long long)out->numel,
                s->s, (unsigned long long)rec->bytes, HINT_TORCH);
    out->offset = rec->offset + first * esize;
}

void torch_file_read_f32(const TorchFile *tf, const TorchTensor *t, const char *name, uint64_t first, uint64_t n,
                         float *dst) {
    if (t->dtype != TORCH_F32 && t->dtype != TORCH_F16 && t->dtype != TORCH_BF16)
        t5_fail("%s: tensor \"%s\" is %s, expected float32, float16 or bfloat16", tf->path, name, torch_dtype_name(t->dtype));
    if (first > t->numel || n > t->numel - first)
        t5_die(__FILE__, __LINE__, "torch_file_read_f32: range outside the tensor", "a bug in the caller");
    int esize = torch_dtype_size(t->dtype);
    if (fseeko(tf->f, (off_t)(t->offset + first * (uint64_t)esize), SEEK_SET) != 0)
        t5_fail("%s: cannot seek to tensor \"%s\" (%s)", tf->path, name, strerror(errno));
    if (t->dtype == TORCH_F32) {
        if (n && fread(dst, 4, (size_t)n, tf->f) != n)
            t5_fail("%s: short read in tensor \"%s\": the file is truncated or changed", tf->path, name);
        return;
    }
    uint16_t *buf = mallocCheck(READ_CHUNK_ELEMS * sizeof *buf);
    for (uint64_t i = 0; i < n;) {
        size_t m = n - i < READ_CHUNK_ELEMS ? (size_t)(n - i) : READ_CHUNK_ELEMS;
        if (fread(buf, 2, m, tf->f) != m)
            t5_fail("%s: short read in tensor \"%s\": the file is truncated or changed", tf->path, name);
        for (size_t j = 0; j < m; j++)
            dst[i + j] = t->dtype == TORCH_F16 ? half_f16_to_f32(buf[j]) : half_bf16_to_f32(buf[j]);
        i += m;
    }
    free(buf);
}

void torch_bin_open(StFile *st, const char *path) {
    TorchFile tf;
    torch_file_open(&tf, path);
    const PkValue *root = tf.root;
    if (root->kind != PK_DICT)
        t5_fail("%s: holds a pickled %s, not a state dict {name: tensor}; HINT: a pytorch_model.bin written by "
                "save_pretrained or torch.save(model.state_dict())", path, pk_kind_name(root->kind));
    memset(st, 0, sizeof *st);
    st->tensors = callocCheck((size_t)(root->n / 2 + 1), sizeof *st->tensors);
    for (int i = 0; i < root->n; i += 2) {
        const PkValue *k = root->items[i], *v = root->items[i + 1];
        if (k->kind != PK_STR) t5_fail("%s: a state-dict key is a %s, not a str", path, pk_kind_name(k->kind));
        TorchTensor t;
        torch_file_tensor(&tf, v, k->s, &t);
        StTensor *o = &st->tensors[st->count];
        static const int TO_ST[TORCH_DTYPE_COUNT] = {[TORCH_F32] = ST_F32 + 1, [TORCH_F16] = ST_F16 + 1,
                                                      [TORCH_BF16] = ST_BF16 + 1, [TORCH_I64] = ST_I64 + 1,
                                                      [TORCH_I32] = ST_I32 + 1};  // 0: no StDtype
        if (!TO_ST[t.dtype])
            t5_fail("%s: tensor \"%s\" is %s (supported: float32, float16, bfloat16, int64, int32)", path, k->s,
                    torch_dtype_name(t.dtype));
        if (t.ndim > ST_MAX_DIMS) t5_fail("%s: tensor \"%s\" has %d dimensions (at most %d)", path, k->s, t.ndim, ST_MAX_DIMS);
        o->name = strdup(k->s);
        if (!o->name) t5_die(__FILE__, __LINE__, "out of host memory", NULL);
        st->count++;
        o->dtype = (StDtype)(TO_ST[t.dtype] - 1);
        o->ndim = t.ndim;
        for (int d = 0; d < t.ndim; d++) o->shape[d] = t.shape[d];
        o->numel = t.numel;
        o->begin = t.offset;
        o->end = t.offset + t.numel * (uint64_t)torch_dtype_size(t.dtype);
    }
    st->path = tf.path;
    st->f = tf.f;
    st->data_start = 0;
    tf.path = NULL;  // now the StFile's
    tf.f = NULL;
    torch_file_close(&tf);
}
