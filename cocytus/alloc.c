/*
 * Deterministic allocator for a Cocytus value region (see alloc.h).
 *
 * The region [0, R) is cut into pieces that tile it exactly.  Every piece is
 * one node (struct dalloc_piece), kept in three structures:
 *   - a singly linked list of all pieces in address order, used to find a
 *     piece's right neighbour when splitting and merging;
 *   - if free, the free tree: an AVL tree keyed by (size, offset), so the
 *     best fit is the first piece whose size is large enough;
 *   - if used, the used tree: an AVL tree keyed by offset, so free() finds
 *     its piece and rejects offsets that start no used piece.
 * A piece is in exactly one tree at a time, so one set of tree links serves
 * both.  Free neighbours are always merged, which makes the free pieces the
 * maximal gaps between used pieces: the state is determined by the set of
 * used pieces, and every decision depends only on (size, offset) keys, never
 * on which node holds a piece or where nodes live in memory.
 *
 * There is no link to the left neighbour.  Splitting only ever inserts new
 * nodes after an existing one, and free() finds the left neighbour of a used
 * piece through the used tree: while searching for the piece it also finds
 * the used piece before it, and the piece right after that one (or the head
 * of the list) is either the freed piece itself or its free left neighbour,
 * since two free pieces are never adjacent.
 *
 * Every piece costs one node, and each data process and every replica of it
 * in the parity processes pays for it, so a node is kept to 24 bytes:
 *   - offsets and sizes are counted in grains (DALLOC_GRAIN bytes) and kept
 *     in 40 bits each, a 32-bit low word plus an 8-bit high byte.  A size is
 *     stored minus one (no piece is empty), so that the largest region,
 *     2^40 grains = 2^44 bytes (16 TiB), fits; dalloc_new() rejects larger
 *     regions (beyond DALLOC_MAX_REGION) with EINVAL;
 *   - links are 32-bit node indices, NIL (0) meaning none;
 *   - the AVL height (7 bits; it never exceeds about 46) and the used flag
 *     share one byte.
 * Nodes live in chunks of NODES_PER_CHUNK, reached through a table of chunk
 * pointers: node i is entry i % NODES_PER_CHUNK of chunk i / NODES_PER_CHUNK.
 * Index 0 (NIL) is never handed out, so at most 2^32 - 1 nodes exist; past
 * that the allocator reports -ENOMEM.  Released nodes go to a spare list
 * linked through `next`, so the steady state does no malloc.  Chunks never
 * move (node pointers stay valid while the table grows) and are freed only
 * by dalloc_destroy().
 */
#include "alloc.h"
#include "radix.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NIL 0u
#define NODES_PER_CHUNK 512u
/* Chunks needed to give every 32-bit index a node. */
#define MAX_CHUNKS (((uint64_t)1 << 32) / NODES_PER_CHUNK)
/* Offsets and sizes in grains must fit the 40-bit fields. */
#define MAX_REGION_GRAINS (DALLOC_MAX_REGION / DALLOC_GRAIN)

#define USED_FLAG 0x80u
#define HEIGHT_MASK 0x7fu

struct dalloc_piece {
    uint32_t off_lo;      /* offset in grains, bits 0..31 */
    uint32_t size_lo;     /* size in grains minus one, bits 0..31 */
    uint32_t next;        /* address order; spare list link */
    uint32_t left;        /* links in the free or the used tree */
    uint32_t right;
    uint8_t off_hi;       /* offset in grains, bits 32..39 */
    uint8_t size_hi;      /* size in grains minus one, bits 32..39 */
    uint8_t height_used;  /* AVL height (a leaf has 1), and USED_FLAG */
};

_Static_assert(sizeof(struct dalloc_piece) == 24,
               "a piece node should take 24 bytes");

struct dalloc {
    uint64_t region_grains;
    uint64_t used_grains;
    uint64_t used_pieces;
    uint64_t free_pieces;
    uint64_t spare_count;
    uint32_t head;                 /* piece at offset 0 */
    uint32_t free_root;            /* keyed by (size, off) */
    uint32_t used_root;            /* keyed by off */
    uint32_t spare;                /* unused nodes */
    struct dalloc_piece **chunks;  /* table of chunk_count chunks */
    uint64_t chunk_count;
    uint64_t chunk_cap;            /* entries allocated in the table */
};

typedef int (*piece_cmp_fn)(const struct dalloc_piece *,
                            const struct dalloc_piece *);

/* ---- nodes --------------------------------------------------------------- */

static struct dalloc_piece *node(const struct dalloc *a, uint32_t i)
{
    return &a->chunks[i / NODES_PER_CHUNK][i % NODES_PER_CHUNK];
}

static uint64_t node_capacity(const struct dalloc *a)
{
    return a->chunk_count * NODES_PER_CHUNK;
}

/* Offset in grains. */
static uint64_t piece_off(const struct dalloc_piece *p)
{
    return (uint64_t)p->off_hi << 32 | p->off_lo;
}

static void set_piece_off(struct dalloc_piece *p, uint64_t off)
{
    p->off_lo = (uint32_t)off;
    p->off_hi = (uint8_t)(off >> 32);
}

/* Size in grains, at least 1. */
static uint64_t piece_size(const struct dalloc_piece *p)
{
    return ((uint64_t)p->size_hi << 32 | p->size_lo) + 1;
}

static void set_piece_size(struct dalloc_piece *p, uint64_t size)
{
    p->size_lo = (uint32_t)(size - 1);
    p->size_hi = (uint8_t)((size - 1) >> 32);
}

static uint64_t piece_end(const struct dalloc_piece *p)
{
    return piece_off(p) + piece_size(p);
}

static bool piece_used(const struct dalloc_piece *p)
{
    return (p->height_used & USED_FLAG) != 0;
}

static void set_piece_used(struct dalloc_piece *p, bool used)
{
    p->height_used = (uint8_t)((p->height_used & HEIGHT_MASK) |
                               (used ? USED_FLAG : 0));
}

static int piece_height(const struct dalloc_piece *p)
{
    return p->height_used & HEIGHT_MASK;
}

static void set_piece_height(struct dalloc_piece *p, int height)
{
    p->height_used = (uint8_t)((p->height_used & USED_FLAG) |
                               ((unsigned)height & HEIGHT_MASK));
}

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
    int c = compare_u64(piece_size(x), piece_size(y));
    if (c != 0)
        return c;
    return compare_u64(piece_off(x), piece_off(y));
}

/* Used tree order: by offset. */
static int used_key_cmp(const struct dalloc_piece *x,
                        const struct dalloc_piece *y)
{
    return compare_u64(piece_off(x), piece_off(y));
}

/* ---- AVL tree ------------------------------------------------------------
 * Trees are passed around as the index of their root.  A subtree whose
 * height did not change is left alone on the way back up, so an update
 * touches only the nodes on its path plus the few where heights change. */

static int tree_height(const struct dalloc *a, uint32_t t)
{
    return t != NIL ? piece_height(node(a, t)) : 0;
}

static void update_height(const struct dalloc *a, uint32_t t)
{
    struct dalloc_piece *p = node(a, t);
    int hl = tree_height(a, p->left);
    int hr = tree_height(a, p->right);

    set_piece_height(p, (hl > hr ? hl : hr) + 1);
}

static int balance_factor(const struct dalloc *a, uint32_t t)
{
    const struct dalloc_piece *p = node(a, t);

    return tree_height(a, p->left) - tree_height(a, p->right);
}

static uint32_t rotate_right(const struct dalloc *a, uint32_t t)
{
    struct dalloc_piece *p = node(a, t);
    uint32_t l = p->left;
    struct dalloc_piece *lp = node(a, l);

    p->left = lp->right;
    lp->right = t;
    update_height(a, t);
    update_height(a, l);
    return l;
}

static uint32_t rotate_left(const struct dalloc *a, uint32_t t)
{
    struct dalloc_piece *p = node(a, t);
    uint32_t r = p->right;
    struct dalloc_piece *rp = node(a, r);

    p->right = rp->left;
    rp->left = t;
    update_height(a, t);
    update_height(a, r);
    return r;
}

/* Restores the AVL property at t, whose subtrees are valid AVL trees with
 * heights differing by at most 2.  Returns the new subtree root. */
static uint32_t rebalance(const struct dalloc *a, uint32_t t)
{
    struct dalloc_piece *p = node(a, t);
    int bf;

    update_height(a, t);
    bf = balance_factor(a, t);
    if (bf > 1) {
        if (balance_factor(a, p->left) < 0)
            p->left = rotate_left(a, p->left);
        return rotate_right(a, t);
    }
    if (bf < -1) {
        if (balance_factor(a, p->right) > 0)
            p->right = rotate_right(a, p->right);
        return rotate_left(a, t);
    }
    return t;
}

/* Rebalances t after one of its subtrees went from height old_height to a
 * new root new_child, unless that subtree's height is unchanged. */
static uint32_t after_child_change(const struct dalloc *a, uint32_t t,
                                   int old_height, uint32_t new_child)
{
    if (tree_height(a, new_child) == old_height)
        return t;
    return rebalance(a, t);
}

static uint32_t tree_insert(const struct dalloc *a, uint32_t t, uint32_t n,
                            piece_cmp_fn cmp)
{
    struct dalloc_piece *p;
    int old_height;

    if (t == NIL) {
        p = node(a, n);
        p->left = NIL;
        p->right = NIL;
        set_piece_height(p, 1);
        return n;
    }
    p = node(a, t);
    if (cmp(node(a, n), p) < 0) {
        old_height = tree_height(a, p->left);
        p->left = tree_insert(a, p->left, n, cmp);
        return after_child_change(a, t, old_height, p->left);
    }
    old_height = tree_height(a, p->right);
    p->right = tree_insert(a, p->right, n, cmp);
    return after_child_change(a, t, old_height, p->right);
}

/* Detaches the leftmost node of t into *min; returns the new subtree root. */
static uint32_t tree_remove_min(const struct dalloc *a, uint32_t t,
                                uint32_t *min)
{
    struct dalloc_piece *p = node(a, t);
    int old_height;

    if (p->left == NIL) {
        *min = t;
        return p->right;
    }
    old_height = tree_height(a, p->left);
    p->left = tree_remove_min(a, p->left, min);
    return after_child_change(a, t, old_height, p->left);
}

/* Removes node n, which must be in t (keys are unique). */
static uint32_t tree_remove(const struct dalloc *a, uint32_t t, uint32_t n,
                            piece_cmp_fn cmp)
{
    struct dalloc_piece *p, *sp;
    uint32_t successor;
    int c, old_height;

    if (t == NIL)
        return NIL;
    p = node(a, t);
    c = cmp(node(a, n), p);
    if (c < 0) {
        old_height = tree_height(a, p->left);
        p->left = tree_remove(a, p->left, n, cmp);
        return after_child_change(a, t, old_height, p->left);
    }
    if (c > 0) {
        old_height = tree_height(a, p->right);
        p->right = tree_remove(a, p->right, n, cmp);
        return after_child_change(a, t, old_height, p->right);
    }
    if (p->left == NIL)
        return p->right;
    if (p->right == NIL)
        return p->left;
    p->right = tree_remove_min(a, p->right, &successor);
    sp = node(a, successor);
    sp->left = p->left;
    sp->right = p->right;
    return rebalance(a, successor);
}

/* Rightmost node of the non-empty tree t. */
static uint32_t tree_max(const struct dalloc *a, uint32_t t)
{
    uint32_t right = node(a, t)->right;

    while (right != NIL) {
        t = right;
        right = node(a, t)->right;
    }
    return t;
}

/* ---- the two trees ------------------------------------------------------- */

static void free_tree_insert(struct dalloc *a, uint32_t i)
{
    a->free_root = tree_insert(a, a->free_root, i, free_key_cmp);
    a->free_pieces++;
}

static void free_tree_remove(struct dalloc *a, uint32_t i)
{
    a->free_root = tree_remove(a, a->free_root, i, free_key_cmp);
    a->free_pieces--;
}

static void used_tree_insert(struct dalloc *a, uint32_t i)
{
    a->used_root = tree_insert(a, a->used_root, i, used_key_cmp);
    a->used_pieces++;
    a->used_grains += piece_size(node(a, i));
}

static void used_tree_remove(struct dalloc *a, uint32_t i)
{
    a->used_root = tree_remove(a, a->used_root, i, used_key_cmp);
    a->used_pieces--;
    a->used_grains -= piece_size(node(a, i));
}

/* Smallest free piece (by size, then offset) with at least `size` grains,
 * or NIL. */
static uint32_t free_tree_best_fit(const struct dalloc *a, uint64_t size)
{
    uint32_t t = a->free_root;
    uint32_t best = NIL;

    while (t != NIL) {
        const struct dalloc_piece *p = node(a, t);
        if (piece_size(p) >= size) {
            best = t;
            t = p->left;
        } else {
            t = p->right;
        }
    }
    return best;
}

/* Used piece starting exactly at grain `off`, or NIL. */
static uint32_t used_tree_find(const struct dalloc *a, uint64_t off)
{
    uint32_t t = a->used_root;

    while (t != NIL) {
        const struct dalloc_piece *p = node(a, t);
        uint64_t key = piece_off(p);
        if (off < key)
            t = p->left;
        else if (off > key)
            t = p->right;
        else
            return t;
    }
    return NIL;
}

/* Like used_tree_find(); on success also stores in *prev the used piece
 * with the next lower offset (NIL if there is none). */
static uint32_t used_tree_find_with_prev(const struct dalloc *a, uint64_t off,
                                         uint32_t *prev)
{
    uint32_t t = a->used_root;
    uint32_t below = NIL;   /* last node passed whose offset is lower */

    while (t != NIL) {
        const struct dalloc_piece *p = node(a, t);
        uint64_t key = piece_off(p);
        if (off < key) {
            t = p->left;
        } else if (off > key) {
            below = t;
            t = p->right;
        } else {
            *prev = p->left != NIL ? tree_max(a, p->left) : below;
            return t;
        }
    }
    return NIL;
}

/* Used piece with the greatest offset <= grain `off`, or NIL. */
static uint32_t used_tree_floor(const struct dalloc *a, uint64_t off)
{
    uint32_t t = a->used_root;
    uint32_t floor = NIL;

    while (t != NIL) {
        const struct dalloc_piece *p = node(a, t);
        if (piece_off(p) <= off) {
            floor = t;
            t = p->right;
        } else {
            t = p->left;
        }
    }
    return floor;
}

/* ---- node storage -------------------------------------------------------- */

static int grow_chunk_table(struct dalloc *a)
{
    uint64_t cap = a->chunk_cap != 0 ? a->chunk_cap * 2 : 8;
    struct dalloc_piece **table;

    if (cap > MAX_CHUNKS)
        cap = MAX_CHUNKS;
    table = realloc(a->chunks, cap * sizeof(*table));
    if (table == NULL)
        return -ENOMEM;
    a->chunks = table;
    a->chunk_cap = cap;
    return 0;
}

/* Adds a chunk and puts its nodes on the spare list. */
static int add_chunk(struct dalloc *a)
{
    struct dalloc_piece *c;
    uint32_t first, k;

    if (a->chunk_count == MAX_CHUNKS)
        return -ENOMEM;
    if (a->chunk_count == a->chunk_cap && grow_chunk_table(a) != 0)
        return -ENOMEM;
    c = malloc(NODES_PER_CHUNK * sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    first = (uint32_t)(a->chunk_count * NODES_PER_CHUNK);
    a->chunks[a->chunk_count] = c;
    a->chunk_count++;
    /* Lowest index on top; index NIL is never a node. */
    for (k = NODES_PER_CHUNK; k-- > 0;) {
        if (first + k == NIL)
            continue;
        c[k].next = a->spare;
        a->spare = first + k;
        a->spare_count++;
    }
    return 0;
}

/* Makes sure that `count` nodes can be taken without failing. */
static int reserve_spares(struct dalloc *a, uint64_t count)
{
    if (a->spare_count >= count)
        return 0;
    return add_chunk(a);
}

/* Takes a zeroed spare node; reserve_spares() must have made one ready. */
static uint32_t take_spare(struct dalloc *a)
{
    uint32_t i = a->spare;
    struct dalloc_piece *p = node(a, i);

    a->spare = p->next;
    a->spare_count--;
    memset(p, 0, sizeof(*p));
    return i;
}

static void give_spare(struct dalloc *a, uint32_t i)
{
    node(a, i)->next = a->spare;
    a->spare = i;
    a->spare_count++;
}

/* ---- splitting and merging ----------------------------------------------- */

/* Puts node j into the address list right after node i. */
static void list_insert_after(const struct dalloc *a, uint32_t i, uint32_t j)
{
    struct dalloc_piece *p = node(a, i);

    node(a, j)->next = p->next;
    p->next = j;
}

/* Number of new nodes carve() needs to cut grains [off, off+size) out of
 * the free piece p. */
static uint64_t carve_spares_needed(const struct dalloc_piece *p, uint64_t off,
                                    uint64_t size)
{
    uint64_t n = 0;

    if (off > piece_off(p))
        n++;
    if (off + size < piece_end(p))
        n++;
    return n;
}

/* Turns grains [off, off+size), which lie inside the free piece i, into a
 * used piece; what is left on either side stays free.  New nodes only ever
 * go after i: a free part on the left keeps node i.  The spares counted by
 * carve_spares_needed() must be ready. */
static void carve(struct dalloc *a, uint32_t i, uint64_t off, uint64_t size)
{
    struct dalloc_piece *p = node(a, i);

    free_tree_remove(a, i);
    if (off > piece_off(p)) {
        uint32_t j = take_spare(a);
        struct dalloc_piece *q = node(a, j);
        set_piece_off(q, off);
        set_piece_size(q, piece_end(p) - off);
        list_insert_after(a, i, j);
        set_piece_size(p, off - piece_off(p));
        free_tree_insert(a, i);
        i = j;
        p = q;
    }
    if (size < piece_size(p)) {
        uint32_t j = take_spare(a);
        struct dalloc_piece *q = node(a, j);
        set_piece_off(q, off + size);
        set_piece_size(q, piece_size(p) - size);
        list_insert_after(a, i, j);
        free_tree_insert(a, j);
        set_piece_size(p, size);
    }
    set_piece_used(p, true);
    used_tree_insert(a, i);
}

/* Merges i's free right neighbour, if any, into i (i is in no tree). */
static void absorb_next_if_free(struct dalloc *a, uint32_t i)
{
    struct dalloc_piece *p = node(a, i);
    struct dalloc_piece *n;
    uint32_t j = p->next;

    if (j == NIL)
        return;
    n = node(a, j);
    if (piece_used(n))
        return;
    free_tree_remove(a, j);
    set_piece_size(p, piece_size(p) + piece_size(n));
    p->next = n->next;
    give_spare(a, j);
}

/* Piece i (in no tree) was used, and prev_used is the used piece before it
 * (NIL if none).  If i's left neighbour is free, merges i into it and
 * returns it, out of the free tree; otherwise returns i. */
static uint32_t merge_into_prev_if_free(struct dalloc *a, uint32_t i,
                                        uint32_t prev_used)
{
    uint32_t left = prev_used != NIL ? node(a, prev_used)->next : a->head;
    struct dalloc_piece *lp, *p;

    if (left == i)
        return i;
    /* Only free pieces lie between two consecutive used pieces, and never
     * two in a row: left is free and its next is i. */
    lp = node(a, left);
    p = node(a, i);
    free_tree_remove(a, left);
    set_piece_size(lp, piece_size(lp) + piece_size(p));
    lp->next = p->next;
    give_spare(a, i);
    return left;
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

uint64_t dalloc_value_piece(uint64_t nbytes)
{
    return dalloc_round_size(nbytes ? nbytes : 1);
}

/* Makes the whole region one free piece; a must hold no pieces and have a
 * spare ready. */
static void init_single_piece(struct dalloc *a)
{
    uint32_t i = take_spare(a);
    struct dalloc_piece *p = node(a, i);

    set_piece_off(p, 0);
    set_piece_size(p, a->region_grains);
    a->head = i;
    free_tree_insert(a, i);
}

struct dalloc *dalloc_new(uint64_t region_size)
{
    struct dalloc *a;

    if (region_size == 0 || region_size % DALLOC_GRAIN != 0 ||
        region_size / DALLOC_GRAIN > MAX_REGION_GRAINS) {
        errno = EINVAL;
        return NULL;
    }
    a = calloc(1, sizeof(*a));
    if (a == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    a->region_grains = region_size / DALLOC_GRAIN;
    if (reserve_spares(a, 1) != 0) {
        dalloc_destroy(a);
        errno = ENOMEM;
        return NULL;
    }
    init_single_piece(a);
    return a;
}

void dalloc_destroy(struct dalloc *a)
{
    uint64_t k;

    if (a == NULL)
        return;
    for (k = 0; k < a->chunk_count; k++)
        free(a->chunks[k]);
    free(a->chunks);
    free(a);
}

void dalloc_reset(struct dalloc *a)
{
    uint32_t i = a->head;

    while (i != NIL) {
        uint32_t next = node(a, i)->next;
        give_spare(a, i);
        i = next;
    }
    a->head = NIL;
    a->free_root = NIL;
    a->used_root = NIL;
    a->used_grains = 0;
    a->used_pieces = 0;
    a->free_pieces = 0;
    init_single_piece(a);
}

int dalloc_alloc(struct dalloc *a, uint64_t size, uint64_t *off)
{
    uint64_t rounded = dalloc_round_size(size);
    const struct dalloc_piece *p;
    uint64_t grains;
    uint32_t i;

    if (rounded == 0)
        return -EINVAL;
    grains = rounded / DALLOC_GRAIN;
    i = free_tree_best_fit(a, grains);
    if (i == NIL)
        return -ENOSPC;
    p = node(a, i);
    if (reserve_spares(a, carve_spares_needed(p, piece_off(p), grains)) != 0)
        return -ENOMEM;
    *off = piece_off(p) * DALLOC_GRAIN;
    carve(a, i, piece_off(p), grains);
    return 0;
}

int dalloc_free(struct dalloc *a, uint64_t off, uint64_t *freed_size)
{
    uint32_t prev_used = NIL;
    uint32_t i;

    if (off % DALLOC_GRAIN != 0)
        return -ENOENT;
    i = used_tree_find_with_prev(a, off / DALLOC_GRAIN, &prev_used);
    if (i == NIL)
        return -ENOENT;
    if (freed_size != NULL)
        *freed_size = piece_size(node(a, i)) * DALLOC_GRAIN;
    used_tree_remove(a, i);
    set_piece_used(node(a, i), false);
    absorb_next_if_free(a, i);
    i = merge_into_prev_if_free(a, i, prev_used);
    free_tree_insert(a, i);
    return 0;
}

int dalloc_reserve(struct dalloc *a, uint64_t off, uint64_t size)
{
    uint64_t rounded = dalloc_round_size(size);
    uint64_t region_size = a->region_grains * DALLOC_GRAIN;
    uint64_t goff, grains;
    const struct dalloc_piece *p;
    uint32_t i;

    if (rounded == 0 || off % DALLOC_GRAIN != 0 || off >= region_size ||
        rounded > region_size - off)
        return -EINVAL;
    goff = off / DALLOC_GRAIN;
    grains = rounded / DALLOC_GRAIN;
    /* The free piece holding off follows the last used piece before it. */
    i = used_tree_floor(a, goff);
    if (i == NIL) {
        i = a->head;
    } else {
        p = node(a, i);
        if (goff < piece_end(p))
            return -ENOSPC;
        i = p->next;
    }
    if (i == NIL)
        return -ENOSPC;
    p = node(a, i);
    if (piece_used(p) || goff + grains > piece_end(p))
        return -ENOSPC;
    if (reserve_spares(a, carve_spares_needed(p, goff, grains)) != 0)
        return -ENOMEM;
    carve(a, i, goff, grains);
    return 0;
}

/* ---- building from a sorted list of used pieces --------------------------- */

/* A balanced tree of the nodes idx[0..n), already in key order: the middle
 * one is the root.  Subtree sizes differ by at most one, so heights do too
 * and the result is an AVL tree.  Recursion depth is log2(n). */
static uint32_t tree_from_sorted(const struct dalloc *a, const uint32_t *idx, size_t n)
{
    if (n == 0)
        return NIL;
    size_t mid = n / 2;
    uint32_t t = idx[mid];
    struct dalloc_piece *p = node(a, t);
    p->left = tree_from_sorted(a, idx, mid);
    p->right = tree_from_sorted(a, idx + mid + 1, n - mid - 1);
    update_height(a, t);
    return t;
}

/* A free gap waiting for the free tree, sorted by its key. */
struct gap {
    uint64_t size, off;
    uint32_t node;
};

static uint64_t gap_size(const void *rec)
{
    return ((const struct gap *)rec)->size;
}

/* Appends a new piece [off, off+size) grains after *last (the list's tail). */
static uint32_t append_piece(struct dalloc *a, uint32_t *last, uint64_t off, uint64_t size,
                             bool used)
{
    uint32_t i = take_spare(a);
    struct dalloc_piece *p = node(a, i);

    set_piece_off(p, off);
    set_piece_size(p, size);
    set_piece_used(p, used);
    if (*last == NIL)
        a->head = i;
    else
        node(a, *last)->next = i;
    *last = i;
    return i;
}

/* Checks the spans and counts the free gaps between them. */
static int spans_check(uint64_t region_grains, const struct dalloc_span *spans, size_t n,
                       size_t *gaps)
{
    uint64_t cursor = 0;

    *gaps = 0;
    for (size_t k = 0; k < n; k++) {
        uint64_t rounded = dalloc_round_size(spans[k].size);
        if (rounded == 0 || spans[k].off % DALLOC_GRAIN != 0 ||
            spans[k].off / DALLOC_GRAIN >= region_grains ||
            rounded / DALLOC_GRAIN > region_grains - spans[k].off / DALLOC_GRAIN)
            return -EINVAL;
        if (spans[k].off / DALLOC_GRAIN < cursor)
            return -ENOSPC;
        if (spans[k].off / DALLOC_GRAIN > cursor)
            (*gaps)++;
        cursor = (spans[k].off + rounded) / DALLOC_GRAIN;
    }
    if (cursor < region_grains)
        (*gaps)++;
    return 0;
}

/* Lays the pieces out in address order and builds both trees; a has no
 * pieces and enough spares, used[] room for max(n, gaps) entries.  0, or
 * -ENOMEM (the caller destroys a). */
static int build_pieces(struct dalloc *a, const struct dalloc_span *spans, size_t n,
                        uint32_t *used, struct gap *gaps)
{
    uint64_t cursor = 0;
    uint32_t last = NIL;
    size_t g = 0;

    for (size_t k = 0; k < n; k++) {
        uint64_t off = spans[k].off / DALLOC_GRAIN;
        uint64_t size = dalloc_round_size(spans[k].size) / DALLOC_GRAIN;
        if (off > cursor) {
            gaps[g] = (struct gap){ off - cursor, cursor, NIL };
            gaps[g++].node = append_piece(a, &last, cursor, off - cursor, false);
        }
        used[k] = append_piece(a, &last, off, size, true);
        a->used_grains += size;
        cursor = off + size;
    }
    if (cursor < a->region_grains) {
        gaps[g] = (struct gap){ a->region_grains - cursor, cursor, NIL };
        gaps[g++].node = append_piece(a, &last, cursor, a->region_grains - cursor, false);
    }
    node(a, last)->next = NIL;
    a->used_root = tree_from_sorted(a, used, n);
    a->used_pieces = n;
    /* The gaps were found in address order, and the sort by size is
     * stable: they end in the free tree's (size, offset) order.  used[]
     * has room for them too. */
    if (radix_sort(gaps, g, sizeof(*gaps), gap_size) != 0)
        return -ENOMEM;
    for (size_t k = 0; k < g; k++)
        used[k] = gaps[k].node;
    a->free_root = tree_from_sorted(a, used, g);
    a->free_pieces = g;
    return 0;
}

struct dalloc *dalloc_from_used(uint64_t region_size, const struct dalloc_span *spans,
                                size_t n)
{
    struct dalloc *a;
    uint32_t *used = NULL;
    struct gap *gaps = NULL;
    size_t ngaps;
    int rc;

    if (region_size == 0 || region_size % DALLOC_GRAIN != 0 ||
        region_size / DALLOC_GRAIN > MAX_REGION_GRAINS) {
        errno = EINVAL;
        return NULL;
    }
    rc = spans_check(region_size / DALLOC_GRAIN, spans, n, &ngaps);
    if (rc != 0) {
        errno = -rc;
        return NULL;
    }
    if (n + ngaps > UINT32_MAX - 1) {   /* indices 1 .. 2^32 - 1 */
        errno = ENOMEM;
        return NULL;
    }
    a = calloc(1, sizeof(*a));
    used = malloc((n > ngaps ? n : ngaps + 1) * sizeof(*used));
    gaps = malloc((ngaps ? ngaps : 1) * sizeof(*gaps));
    rc = a != NULL && used != NULL && gaps != NULL ? 0 : -ENOMEM;
    if (rc == 0) {
        a->region_grains = region_size / DALLOC_GRAIN;
        while (rc == 0 && a->spare_count < n + ngaps)
            rc = add_chunk(a);
    }
    if (rc == 0)
        rc = build_pieces(a, spans, n, used, gaps);
    free(used);
    free(gaps);
    if (rc != 0) {
        dalloc_destroy(a);
        errno = ENOMEM;
        return NULL;
    }
    return a;
}

uint64_t dalloc_size_of(const struct dalloc *a, uint64_t off)
{
    uint32_t i;

    if (off % DALLOC_GRAIN != 0)
        return 0;
    i = used_tree_find(a, off / DALLOC_GRAIN);
    return i != NIL ? piece_size(node(a, i)) * DALLOC_GRAIN : 0;
}

uint64_t dalloc_region_size(const struct dalloc *a)
{
    return a->region_grains * DALLOC_GRAIN;
}

uint64_t dalloc_used_bytes(const struct dalloc *a)
{
    return a->used_grains * DALLOC_GRAIN;
}

uint64_t dalloc_free_bytes(const struct dalloc *a)
{
    return (a->region_grains - a->used_grains) * DALLOC_GRAIN;
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
    if (a->free_root == NIL)
        return 0;
    return piece_size(node(a, tree_max(a, a->free_root))) * DALLOC_GRAIN;
}

/* The struct, the whole chunk table and every chunk, used or spare. */
size_t dalloc_meta_bytes(const struct dalloc *a)
{
    return sizeof(*a) + a->chunk_cap * sizeof(*a->chunks) +
           node_capacity(a) * sizeof(struct dalloc_piece);
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

/* Hashes bytes, not grains, as the format in alloc.h says. */
uint64_t dalloc_digest(const struct dalloc *a)
{
    uint64_t h = FNV64_OFFSET_BASIS;
    uint32_t i;

    h = fnv_u64(h, a->region_grains * DALLOC_GRAIN);
    for (i = a->head; i != NIL; i = node(a, i)->next) {
        const struct dalloc_piece *p = node(a, i);
        h = fnv_u64(h, piece_off(p) * DALLOC_GRAIN);
        h = fnv_u64(h, piece_size(p) * DALLOC_GRAIN);
        h = fnv_byte(h, piece_used(p) ? 1 : 0);
    }
    return h;
}

/* The same walk over used pieces and the maximal gaps between them that
 * dalloc_from_used() lays out, hashed as dalloc_digest() hashes the list. */
int dalloc_digest_of_used(uint64_t region_size, const struct dalloc_span *spans, size_t n,
                          uint64_t *digest)
{
    uint64_t h = FNV64_OFFSET_BASIS;
    uint64_t cursor = 0;
    size_t ngaps;
    int rc;

    if (region_size == 0 || region_size % DALLOC_GRAIN != 0 ||
        region_size / DALLOC_GRAIN > MAX_REGION_GRAINS)
        return -EINVAL;
    rc = spans_check(region_size / DALLOC_GRAIN, spans, n, &ngaps);
    if (rc != 0)
        return rc;
    h = fnv_u64(h, region_size);
    for (size_t k = 0; k < n; k++) {
        uint64_t rounded = dalloc_round_size(spans[k].size);
        if (spans[k].off > cursor) {
            h = fnv_u64(h, cursor);
            h = fnv_u64(h, spans[k].off - cursor);
            h = fnv_byte(h, 0);
        }
        h = fnv_u64(h, spans[k].off);
        h = fnv_u64(h, rounded);
        h = fnv_byte(h, 1);
        cursor = spans[k].off + rounded;
    }
    if (cursor < region_size) {
        h = fnv_u64(h, cursor);
        h = fnv_u64(h, region_size - cursor);
        h = fnv_byte(h, 0);
    }
    *digest = h;
    return 0;
}

/* ---- self check ---------------------------------------------------------- */

/* Is i the index of a node that exists? */
static bool valid_index(const struct dalloc *a, uint32_t i)
{
    return i != NIL && i < node_capacity(a);
}

/* Checks links, heights, balance and key order of tree t, and that every
 * node's state is `used`.  Counts nodes into *count; *last is the previous
 * node in order (NIL before the first). */
static int check_tree(const struct dalloc *a, uint32_t t, piece_cmp_fn cmp,
                      bool used, uint32_t *last, uint64_t *count)
{
    const struct dalloc_piece *p;
    int hl, hr, hmax, rc;

    if (t == NIL)
        return DALLOC_CHECK_OK;
    if (!valid_index(a, t))
        return DALLOC_CHECK_TREE_MEMBERSHIP;
    p = node(a, t);
    rc = check_tree(a, p->left, cmp, used, last, count);
    if (rc != DALLOC_CHECK_OK)
        return rc;
    if (*last != NIL && cmp(node(a, *last), p) >= 0)
        return DALLOC_CHECK_TREE_ORDER;
    if (piece_used(p) != used)
        return DALLOC_CHECK_TREE_MEMBERSHIP;
    *last = t;
    (*count)++;
    rc = check_tree(a, p->right, cmp, used, last, count);
    if (rc != DALLOC_CHECK_OK)
        return rc;
    hl = tree_height(a, p->left);
    hr = tree_height(a, p->right);
    hmax = hl > hr ? hl : hr;
    if (piece_height(p) != hmax + 1 || hl - hr > 1 || hr - hl > 1)
        return DALLOC_CHECK_TREE_BALANCE;
    return DALLOC_CHECK_OK;
}

/* Is node i itself reachable in tree t by searching for its key? */
static bool tree_contains(const struct dalloc *a, uint32_t t, uint32_t i,
                          piece_cmp_fn cmp)
{
    const struct dalloc_piece *p = node(a, i);

    while (t != NIL) {
        int c = cmp(p, node(a, t));
        if (c == 0)
            return t == i;
        t = c < 0 ? node(a, t)->left : node(a, t)->right;
    }
    return false;
}

/* Walks the address list: links, tiling, alignment, merging, and that each
 * piece is found in the tree matching its state.  Tallies the counters.
 * Offsets strictly increase along a good list, so the walk ends even if a
 * link is corrupt. */
static int check_list(const struct dalloc *a, uint64_t *used_grains,
                      uint64_t *used_pieces, uint64_t *free_pieces)
{
    uint32_t i;
    const struct dalloc_piece *prev = NULL;
    uint64_t expect_off = 0;

    if (!valid_index(a, a->head))
        return DALLOC_CHECK_LIST_LINKS;
    for (i = a->head; i != NIL; i = node(a, i)->next) {
        const struct dalloc_piece *p;
        if (!valid_index(a, i))
            return DALLOC_CHECK_LIST_LINKS;
        p = node(a, i);
        if (piece_off(p) != expect_off ||
            piece_size(p) > a->region_grains - piece_off(p))
            return DALLOC_CHECK_TILING;
        expect_off = piece_end(p);
        if (prev != NULL && !piece_used(prev) && !piece_used(p))
            return DALLOC_CHECK_UNMERGED;
        if (piece_used(p)) {
            if (!tree_contains(a, a->used_root, i, used_key_cmp))
                return DALLOC_CHECK_TREE_MEMBERSHIP;
            *used_grains += piece_size(p);
            (*used_pieces)++;
        } else {
            if (!tree_contains(a, a->free_root, i, free_key_cmp))
                return DALLOC_CHECK_TREE_MEMBERSHIP;
            (*free_pieces)++;
        }
        prev = p;
    }
    if (expect_off != a->region_grains)
        return DALLOC_CHECK_TILING;
    return DALLOC_CHECK_OK;
}

/* The spare list holds spare_count valid nodes, and together with the
 * pieces they account for every node but NIL. */
static int check_spares(const struct dalloc *a, uint64_t pieces)
{
    uint64_t count = 0;
    uint32_t i;

    for (i = a->spare; i != NIL; i = node(a, i)->next) {
        if (!valid_index(a, i) || count == a->spare_count)
            return DALLOC_CHECK_COUNTERS;
        count++;
    }
    if (count != a->spare_count || pieces + count + 1 != node_capacity(a))
        return DALLOC_CHECK_COUNTERS;
    return DALLOC_CHECK_OK;
}

int dalloc_check(const struct dalloc *a)
{
    uint32_t last;
    uint64_t used_grains = 0, used_pieces = 0, free_pieces = 0;
    uint64_t tree_used = 0, tree_free = 0;
    int rc;

    rc = check_list(a, &used_grains, &used_pieces, &free_pieces);
    if (rc != DALLOC_CHECK_OK)
        return rc;
    last = NIL;
    rc = check_tree(a, a->free_root, free_key_cmp, false, &last, &tree_free);
    if (rc != DALLOC_CHECK_OK)
        return rc;
    last = NIL;
    rc = check_tree(a, a->used_root, used_key_cmp, true, &last, &tree_used);
    if (rc != DALLOC_CHECK_OK)
        return rc;
    /* Every list piece was found in its tree; equal counts mean the trees
     * hold nothing else. */
    if (tree_free != free_pieces || tree_used != used_pieces)
        return DALLOC_CHECK_TREE_MEMBERSHIP;
    if (used_grains != a->used_grains || used_pieces != a->used_pieces ||
        free_pieces != a->free_pieces)
        return DALLOC_CHECK_COUNTERS;
    return check_spares(a, used_pieces + free_pieces);
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
    it->a = a;
    it->next = a->head;
}

/* The used tree finds the last used piece at or below off; the pieces
 * after it in address order start above off, or are free. */
void dalloc_iter_seek(const struct dalloc *a, struct dalloc_iter *it, uint64_t off)
{
    uint64_t grain = off / DALLOC_GRAIN;
    uint32_t floor = used_tree_floor(a, grain);

    it->a = a;
    if (floor == NIL)
        it->next = a->head;
    else if (piece_off(node(a, floor)) == grain && off % DALLOC_GRAIN == 0)
        it->next = floor;
    else
        it->next = node(a, floor)->next;
}

bool dalloc_iter_next(struct dalloc_iter *it, uint64_t *off, uint64_t *size,
                      bool *used)
{
    const struct dalloc_piece *p;

    if (it->next == NIL)
        return false;
    p = node(it->a, it->next);
    *off = piece_off(p) * DALLOC_GRAIN;
    *size = piece_size(p) * DALLOC_GRAIN;
    if (used != NULL)
        *used = piece_used(p);
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
