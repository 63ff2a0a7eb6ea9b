/*
 * Deterministic allocator for a Cocytus value region (see alloc.h).
 *
 * The region [0, R) is cut into pieces that tile it exactly.  Every piece is
 * one struct dalloc_piece, kept in three structures:
 *   - a doubly linked list of all pieces in address order, used to find a
 *     piece's neighbours when splitting and merging;
 *   - if free, the free tree: an AVL tree keyed by (size, offset), so the
 *     best fit is the first piece whose size is large enough;
 *   - if used, the used tree: an AVL tree keyed by offset, so free() finds
 *     its piece and rejects offsets that start no used piece.
 * A piece is in exactly one tree at a time, so one set of tree links serves
 * both.  Free neighbours are always merged, which makes the free pieces the
 * maximal gaps between used pieces: the state is determined by the set of
 * used pieces, and every decision depends only on (size, offset) keys, never
 * on where the piece structs happen to live in memory.
 *
 * Piece structs come from chunks of PIECES_PER_CHUNK; released ones go to a
 * spare list, so the steady state does no malloc.  Chunks are freed only by
 * dalloc_destroy().
 */
#include "alloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PIECES_PER_CHUNK 256

struct dalloc_piece {
    uint64_t off;
    uint64_t size;
    struct dalloc_piece *prev;   /* address order */
    struct dalloc_piece *next;   /* address order; spare list link */
    struct dalloc_piece *left;   /* links in the free or the used tree */
    struct dalloc_piece *right;
    int height;                  /* AVL height; a leaf has height 1 */
    bool used;
};

struct piece_chunk {
    struct piece_chunk *next;
    struct dalloc_piece pieces[PIECES_PER_CHUNK];
};

struct dalloc {
    uint64_t region_size;
    struct dalloc_piece *head;       /* piece at offset 0 */
    struct dalloc_piece *free_root;  /* keyed by (size, off) */
    struct dalloc_piece *used_root;  /* keyed by off */
    uint64_t used_bytes;
    uint64_t used_pieces;
    uint64_t free_pieces;
    struct dalloc_piece *spare;      /* unused piece structs */
    uint64_t spare_count;
    struct piece_chunk *chunks;
    uint64_t chunk_count;
};

typedef int (*piece_cmp_fn)(const struct dalloc_piece *,
                            const struct dalloc_piece *);

/* ---- keys ---------------------------------------------------------------- */

static int compare_u64(uint64_t x, uint64_t y)
{
    if (x < y)
        return -1;
    return x > y;
}

/* Free tree order: by size, then by offset. */
static int free_key_cmp(const struct dalloc_piece *x,
                        const struct dalloc_piece *y)
{
    int c = compare_u64(x->size, y->size);
    if (c != 0)
        return c;
    return compare_u64(x->off, y->off);
}

/* Used tree order: by offset. */
static int used_key_cmp(const struct dalloc_piece *x,
                        const struct dalloc_piece *y)
{
    return compare_u64(x->off, y->off);
}

static uint64_t piece_end(const struct dalloc_piece *p)
{
    return p->off + p->size;
}

/* ---- AVL tree ------------------------------------------------------------ */

static int tree_height(const struct dalloc_piece *t)
{
    return t ? t->height : 0;
}

static void update_height(struct dalloc_piece *t)
{
    int hl = tree_height(t->left);
    int hr = tree_height(t->right);
    t->height = (hl > hr ? hl : hr) + 1;
}

static int balance_factor(const struct dalloc_piece *t)
{
    return tree_height(t->left) - tree_height(t->right);
}

static struct dalloc_piece *rotate_right(struct dalloc_piece *t)
{
    struct dalloc_piece *l = t->left;
    t->left = l->right;
    l->right = t;
    update_height(t);
    update_height(l);
    return l;
}

static struct dalloc_piece *rotate_left(struct dalloc_piece *t)
{
    struct dalloc_piece *r = t->right;
    t->right = r->left;
    r->left = t;
    update_height(t);
    update_height(r);
    return r;
}

/* Restores the AVL property at t, whose subtrees are valid AVL trees with
 * heights differing by at most 2.  Returns the new subtree root. */
static struct dalloc_piece *rebalance(struct dalloc_piece *t)
{
    int bf;

    update_height(t);
    bf = balance_factor(t);
    if (bf > 1) {
        if (balance_factor(t->left) < 0)
            t->left = rotate_left(t->left);
        return rotate_right(t);
    }
    if (bf < -1) {
        if (balance_factor(t->right) > 0)
            t->right = rotate_right(t->right);
        return rotate_left(t);
    }
    return t;
}

static struct dalloc_piece *tree_insert(struct dalloc_piece *t,
                                        struct dalloc_piece *n,
                                        piece_cmp_fn cmp)
{
    if (t == NULL) {
        n->left = NULL;
        n->right = NULL;
        n->height = 1;
        return n;
    }
    if (cmp(n, t) < 0)
        t->left = tree_insert(t->left, n, cmp);
    else
        t->right = tree_insert(t->right, n, cmp);
    return rebalance(t);
}

/* Detaches the leftmost node of t into *min; returns the new subtree root. */
static struct dalloc_piece *tree_remove_min(struct dalloc_piece *t,
                                            struct dalloc_piece **min)
{
    if (t->left == NULL) {
        *min = t;
        return t->right;
    }
    t->left = tree_remove_min(t->left, min);
    return rebalance(t);
}

/* Removes node n, which must be in t (keys are unique). */
static struct dalloc_piece *tree_remove(struct dalloc_piece *t,
                                        struct dalloc_piece *n,
                                        piece_cmp_fn cmp)
{
    struct dalloc_piece *successor;
    int c;

    if (t == NULL)
        return NULL;
    c = cmp(n, t);
    if (c < 0) {
        t->left = tree_remove(t->left, n, cmp);
        return rebalance(t);
    }
    if (c > 0) {
        t->right = tree_remove(t->right, n, cmp);
        return rebalance(t);
    }
    if (t->left == NULL)
        return t->right;
    if (t->right == NULL)
        return t->left;
    t->right = tree_remove_min(t->right, &successor);
    successor->left = t->left;
    successor->right = t->right;
    return rebalance(successor);
}

/* ---- the two trees ------------------------------------------------------- */

static void free_tree_insert(struct dalloc *a, struct dalloc_piece *p)
{
    a->free_root = tree_insert(a->free_root, p, free_key_cmp);
    a->free_pieces++;
}

static void free_tree_remove(struct dalloc *a, struct dalloc_piece *p)
{
    a->free_root = tree_remove(a->free_root, p, free_key_cmp);
    a->free_pieces--;
}

static void used_tree_insert(struct dalloc *a, struct dalloc_piece *p)
{
    a->used_root = tree_insert(a->used_root, p, used_key_cmp);
    a->used_pieces++;
    a->used_bytes += p->size;
}

static void used_tree_remove(struct dalloc *a, struct dalloc_piece *p)
{
    a->used_root = tree_remove(a->used_root, p, used_key_cmp);
    a->used_pieces--;
    a->used_bytes -= p->size;
}

/* Smallest free piece (by size, then offset) with size >= size, or NULL. */
static struct dalloc_piece *free_tree_best_fit(const struct dalloc *a,
                                               uint64_t size)
{
    struct dalloc_piece *t = a->free_root;
    struct dalloc_piece *best = NULL;

    while (t != NULL) {
        if (t->size >= size) {
            best = t;
            t = t->left;
        } else {
            t = t->right;
        }
    }
    return best;
}

/* Used piece starting exactly at off, or NULL. */
static struct dalloc_piece *used_tree_find(const struct dalloc *a,
                                           uint64_t off)
{
    struct dalloc_piece *t = a->used_root;

    while (t != NULL) {
        if (off < t->off)
            t = t->left;
        else if (off > t->off)
            t = t->right;
        else
            return t;
    }
    return NULL;
}

/* Used piece with the greatest offset <= off, or NULL. */
static struct dalloc_piece *used_tree_floor(const struct dalloc *a,
                                            uint64_t off)
{
    struct dalloc_piece *t = a->used_root;
    struct dalloc_piece *floor = NULL;

    while (t != NULL) {
        if (t->off <= off) {
            floor = t;
            t = t->right;
        } else {
            t = t->left;
        }
    }
    return floor;
}

/* ---- piece structs ------------------------------------------------------- */

static int add_chunk(struct dalloc *a)
{
    struct piece_chunk *c = malloc(sizeof(*c));
    int i;

    if (c == NULL)
        return -ENOMEM;
    c->next = a->chunks;
    a->chunks = c;
    a->chunk_count++;
    for (i = PIECES_PER_CHUNK - 1; i >= 0; i--) {
        c->pieces[i].next = a->spare;
        a->spare = &c->pieces[i];
    }
    a->spare_count += PIECES_PER_CHUNK;
    return 0;
}

/* Makes sure that `count` piece structs can be taken without failing. */
static int reserve_spares(struct dalloc *a, uint64_t count)
{
    if (a->spare_count >= count)
        return 0;
    return add_chunk(a);
}

/* Takes a spare piece struct; reserve_spares() must have made one ready. */
static struct dalloc_piece *take_spare(struct dalloc *a)
{
    struct dalloc_piece *p = a->spare;

    a->spare = p->next;
    a->spare_count--;
    memset(p, 0, sizeof(*p));
    return p;
}

static void give_spare(struct dalloc *a, struct dalloc_piece *p)
{
    p->next = a->spare;
    a->spare = p;
    a->spare_count++;
}

/* ---- address list -------------------------------------------------------- */

/* Puts n into the list right before p. */
static void list_insert_before(struct dalloc *a, struct dalloc_piece *p,
                               struct dalloc_piece *n)
{
    n->prev = p->prev;
    n->next = p;
    if (p->prev != NULL)
        p->prev->next = n;
    else
        a->head = n;
    p->prev = n;
}

/* Puts n into the list right after p. */
static void list_insert_after(struct dalloc_piece *p, struct dalloc_piece *n)
{
    n->prev = p;
    n->next = p->next;
    if (p->next != NULL)
        p->next->prev = n;
    p->next = n;
}

static void list_unlink(struct dalloc *a, struct dalloc_piece *p)
{
    if (p->prev != NULL)
        p->prev->next = p->next;
    else
        a->head = p->next;
    if (p->next != NULL)
        p->next->prev = p->prev;
}

/* ---- splitting and merging ----------------------------------------------- */

/* Number of new piece structs carve() needs to cut [off, off+size) out of
 * the free piece p. */
static uint64_t carve_spares_needed(const struct dalloc_piece *p, uint64_t off,
                                    uint64_t size)
{
    uint64_t n = 0;

    if (off > p->off)
        n++;
    if (off + size < piece_end(p))
        n++;
    return n;
}

/* Turns [off, off+size), which lies inside the free piece p, into a used
 * piece; what is left of p on either side stays free.  The spares counted by
 * carve_spares_needed() must be ready. */
static void carve(struct dalloc *a, struct dalloc_piece *p, uint64_t off,
                  uint64_t size)
{
    free_tree_remove(a, p);
    if (off > p->off) {
        struct dalloc_piece *left = take_spare(a);
        left->off = p->off;
        left->size = off - p->off;
        list_insert_before(a, p, left);
        free_tree_insert(a, left);
        p->size -= left->size;
        p->off = off;
    }
    if (size < p->size) {
        struct dalloc_piece *right = take_spare(a);
        right->off = off + size;
        right->size = p->size - size;
        list_insert_after(p, right);
        free_tree_insert(a, right);
        p->size = size;
    }
    p->used = true;
    used_tree_insert(a, p);
}

/* Merges p's free right neighbour, if any, into p (p is in no tree). */
static void absorb_next_if_free(struct dalloc *a, struct dalloc_piece *p)
{
    struct dalloc_piece *n = p->next;

    if (n == NULL || n->used)
        return;
    free_tree_remove(a, n);
    p->size += n->size;
    list_unlink(a, n);
    give_spare(a, n);
}

/* If the left neighbour of p (p is in no tree) is free, merges p into it and
 * returns it, out of the free tree; otherwise returns p. */
static struct dalloc_piece *merge_into_prev_if_free(struct dalloc *a,
                                                    struct dalloc_piece *p)
{
    struct dalloc_piece *prev = p->prev;

    if (prev == NULL || prev->used)
        return p;
    free_tree_remove(a, prev);
    prev->size += p->size;
    list_unlink(a, p);
    give_spare(a, p);
    return prev;
}

/* ---- public API ---------------------------------------------------------- */

uint64_t dalloc_round_size(uint64_t size)
{
    if (size == 0)
        return DALLOC_GRAIN;
    if (size > UINT64_MAX - (DALLOC_GRAIN - 1))
        return 0;
    return (size + DALLOC_GRAIN - 1) / DALLOC_GRAIN * DALLOC_GRAIN;
}

/* Makes the whole region one free piece; a must hold no pieces and have a
 * spare ready. */
static void init_single_piece(struct dalloc *a)
{
    struct dalloc_piece *p = take_spare(a);

    p->off = 0;
    p->size = a->region_size;
    a->head = p;
    free_tree_insert(a, p);
}

struct dalloc *dalloc_new(uint64_t region_size)
{
    struct dalloc *a;

    if (region_size == 0 || region_size % DALLOC_GRAIN != 0) {
        errno = EINVAL;
        return NULL;
    }
    a = calloc(1, sizeof(*a));
    if (a == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    a->region_size = region_size;
    if (reserve_spares(a, 1) != 0) {
        free(a);
        errno = ENOMEM;
        return NULL;
    }
    init_single_piece(a);
    return a;
}

void dalloc_destroy(struct dalloc *a)
{
    struct piece_chunk *c;

    if (a == NULL)
        return;
    c = a->chunks;
    while (c != NULL) {
        struct piece_chunk *next = c->next;
        free(c);
        c = next;
    }
    free(a);
}

void dalloc_reset(struct dalloc *a)
{
    struct dalloc_piece *p = a->head;

    while (p != NULL) {
        struct dalloc_piece *next = p->next;
        give_spare(a, p);
        p = next;
    }
    a->head = NULL;
    a->free_root = NULL;
    a->used_root = NULL;
    a->used_bytes = 0;
    a->used_pieces = 0;
    a->free_pieces = 0;
    init_single_piece(a);
}

int dalloc_alloc(struct dalloc *a, uint64_t size, uint64_t *off)
{
    uint64_t rounded = dalloc_round_size(size);
    struct dalloc_piece *p;

    if (rounded == 0)
        return -EINVAL;
    p = free_tree_best_fit(a, rounded);
    if (p == NULL)
        return -ENOSPC;
    if (reserve_spares(a, carve_spares_needed(p, p->off, rounded)) != 0)
        return -ENOMEM;
    *off = p->off;
    carve(a, p, p->off, rounded);
    return 0;
}

int dalloc_free(struct dalloc *a, uint64_t off, uint64_t *freed_size)
{
    struct dalloc_piece *p = used_tree_find(a, off);

    if (p == NULL)
        return -ENOENT;
    if (freed_size != NULL)
        *freed_size = p->size;
    used_tree_remove(a, p);
    p->used = false;
    absorb_next_if_free(a, p);
    p = merge_into_prev_if_free(a, p);
    free_tree_insert(a, p);
    return 0;
}

int dalloc_reserve(struct dalloc *a, uint64_t off, uint64_t size)
{
    uint64_t rounded = dalloc_round_size(size);
    struct dalloc_piece *p;

    if (rounded == 0 || off % DALLOC_GRAIN != 0 || off >= a->region_size ||
        rounded > a->region_size - off)
        return -EINVAL;
    /* The free piece holding off follows the last used piece before it. */
    p = used_tree_floor(a, off);
    if (p == NULL)
        p = a->head;
    else if (off < piece_end(p))
        return -ENOSPC;
    else
        p = p->next;
    if (p == NULL || p->used || off + rounded > piece_end(p))
        return -ENOSPC;
    if (reserve_spares(a, carve_spares_needed(p, off, rounded)) != 0)
        return -ENOMEM;
    carve(a, p, off, rounded);
    return 0;
}

uint64_t dalloc_size_of(const struct dalloc *a, uint64_t off)
{
    const struct dalloc_piece *p = used_tree_find(a, off);

    return p ? p->size : 0;
}

uint64_t dalloc_region_size(const struct dalloc *a)
{
    return a->region_size;
}

uint64_t dalloc_used_bytes(const struct dalloc *a)
{
    return a->used_bytes;
}

uint64_t dalloc_free_bytes(const struct dalloc *a)
{
    return a->region_size - a->used_bytes;
}

uint64_t dalloc_used_pieces(const struct dalloc *a)
{
    return a->used_pieces;
}

uint64_t dalloc_free_pieces(const struct dalloc *a)
{
    return a->free_pieces;
}

uint64_t dalloc_largest_free(const struct dalloc *a)
{
    const struct dalloc_piece *t = a->free_root;

    if (t == NULL)
        return 0;
    while (t->right != NULL)
        t = t->right;
    return t->size;
}

size_t dalloc_meta_bytes(const struct dalloc *a)
{
    return sizeof(*a) + a->chunk_count * sizeof(struct piece_chunk);
}

/* ---- digest -------------------------------------------------------------- */

#define FNV64_OFFSET_BASIS 0xcbf29ce484222325ULL
#define FNV64_PRIME 0x100000001b3ULL

static uint64_t fnv_byte(uint64_t h, uint8_t byte)
{
    return (h ^ byte) * FNV64_PRIME;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    int i;

    for (i = 0; i < 8; i++)
        h = fnv_byte(h, (uint8_t)(v >> (8 * i)));
    return h;
}

uint64_t dalloc_digest(const struct dalloc *a)
{
    const struct dalloc_piece *p;
    uint64_t h = FNV64_OFFSET_BASIS;

    h = fnv_u64(h, a->region_size);
    for (p = a->head; p != NULL; p = p->next) {
        h = fnv_u64(h, p->off);
        h = fnv_u64(h, p->size);
        h = fnv_byte(h, p->used ? 1 : 0);
    }
    return h;
}

/* ---- self check ---------------------------------------------------------- */

/* Checks heights, balance and key order of tree t, and that every node's
 * state is `used`.  Counts nodes into *count; *last is the previous node in
 * order (NULL before the first). */
static int check_tree(const struct dalloc_piece *t, piece_cmp_fn cmp,
                      bool used, const struct dalloc_piece **last,
                      uint64_t *count)
{
    int hl, hr, hmax, rc;

    if (t == NULL)
        return DALLOC_CHECK_OK;
    rc = check_tree(t->left, cmp, used, last, count);
    if (rc != DALLOC_CHECK_OK)
        return rc;
    if (*last != NULL && cmp(*last, t) >= 0)
        return DALLOC_CHECK_TREE_ORDER;
    if (t->used != used)
        return DALLOC_CHECK_TREE_MEMBERSHIP;
    *last = t;
    (*count)++;
    rc = check_tree(t->right, cmp, used, last, count);
    if (rc != DALLOC_CHECK_OK)
        return rc;
    hl = tree_height(t->left);
    hr = tree_height(t->right);
    hmax = hl > hr ? hl : hr;
    if (t->height != hmax + 1 || hl - hr > 1 || hr - hl > 1)
        return DALLOC_CHECK_TREE_BALANCE;
    return DALLOC_CHECK_OK;
}

/* Is p itself reachable in tree t by searching for its key? */
static bool tree_contains(const struct dalloc_piece *t,
                          const struct dalloc_piece *p, piece_cmp_fn cmp)
{
    while (t != NULL) {
        int c = cmp(p, t);
        if (c == 0)
            return t == p;
        t = c < 0 ? t->left : t->right;
    }
    return false;
}

/* Walks the address list: links, tiling, alignment, merging, and that each
 * piece is found in the tree matching its state.  Tallies the counters. */
static int check_list(const struct dalloc *a, uint64_t *used_bytes,
                      uint64_t *used_pieces, uint64_t *free_pieces)
{
    const struct dalloc_piece *p;
    const struct dalloc_piece *prev = NULL;
    uint64_t expect_off = 0;

    if (a->head == NULL || a->head->prev != NULL)
        return DALLOC_CHECK_LIST_LINKS;
    for (p = a->head; p != NULL; prev = p, p = p->next) {
        if (p->prev != prev)
            return DALLOC_CHECK_LIST_LINKS;
        if (p->size == 0 || p->size % DALLOC_GRAIN != 0 ||
            p->off % DALLOC_GRAIN != 0)
            return DALLOC_CHECK_ALIGNMENT;
        if (p->off != expect_off || p->size > a->region_size - p->off)
            return DALLOC_CHECK_TILING;
        expect_off = piece_end(p);
        if (prev != NULL && !prev->used && !p->used)
            return DALLOC_CHECK_UNMERGED;
        if (p->used) {
            if (!tree_contains(a->used_root, p, used_key_cmp))
                return DALLOC_CHECK_TREE_MEMBERSHIP;
            *used_bytes += p->size;
            (*used_pieces)++;
        } else {
            if (!tree_contains(a->free_root, p, free_key_cmp))
                return DALLOC_CHECK_TREE_MEMBERSHIP;
            (*free_pieces)++;
        }
    }
    if (expect_off != a->region_size)
        return DALLOC_CHECK_TILING;
    return DALLOC_CHECK_OK;
}

int dalloc_check(const struct dalloc *a)
{
    const struct dalloc_piece *last;
    uint64_t used_bytes = 0, used_pieces = 0, free_pieces = 0;
    uint64_t tree_used = 0, tree_free = 0;
    int rc;

    rc = check_list(a, &used_bytes, &used_pieces, &free_pieces);
    if (rc != DALLOC_CHECK_OK)
        return rc;
    last = NULL;
    rc = check_tree(a->free_root, free_key_cmp, false, &last, &tree_free);
    if (rc != DALLOC_CHECK_OK)
        return rc;
    last = NULL;
    rc = check_tree(a->used_root, used_key_cmp, true, &last, &tree_used);
    if (rc != DALLOC_CHECK_OK)
        return rc;
    /* Every list piece was found in its tree; equal counts mean the trees
     * hold nothing else. */
    if (tree_free != free_pieces || tree_used != used_pieces)
        return DALLOC_CHECK_TREE_MEMBERSHIP;
    if (used_bytes != a->used_bytes || used_pieces != a->used_pieces ||
        free_pieces != a->free_pieces)
        return DALLOC_CHECK_COUNTERS;
    return DALLOC_CHECK_OK;
}

const char *dalloc_check_str(int result)
{
    switch (result) {
    case DALLOC_CHECK_OK:
        return "ok";
    case DALLOC_CHECK_LIST_LINKS:
        return "address list links inconsistent";
    case DALLOC_CHECK_TILING:
        return "pieces do not tile the region";
    case DALLOC_CHECK_ALIGNMENT:
        return "piece offset or size not aligned, or empty piece";
    case DALLOC_CHECK_UNMERGED:
        return "two adjacent free pieces";
    case DALLOC_CHECK_TREE_ORDER:
        return "tree keys out of order";
    case DALLOC_CHECK_TREE_BALANCE:
        return "tree height or balance wrong";
    case DALLOC_CHECK_TREE_MEMBERSHIP:
        return "piece missing from its tree or in the wrong tree";
    case DALLOC_CHECK_COUNTERS:
        return "counters disagree with the pieces";
    default:
        return "unknown check result";
    }
}

/* ---- iteration ----------------------------------------------------------- */

void dalloc_iter_init(const struct dalloc *a, struct dalloc_iter *it)
{
    it->next = a->head;
}

bool dalloc_iter_next(struct dalloc_iter *it, uint64_t *off, uint64_t *size,
                      bool *used)
{
    const struct dalloc_piece *p = it->next;

    if (p == NULL)
        return false;
    *off = p->off;
    *size = p->size;
    if (used != NULL)
        *used = p->used;
    it->next = p->next;
    return true;
}

bool dalloc_iter_next_used(struct dalloc_iter *it, uint64_t *off,
                           uint64_t *size)
{
    bool used;

    while (dalloc_iter_next(it, off, size, &used)) {
        if (used)
            return true;
    }
    return false;
}
