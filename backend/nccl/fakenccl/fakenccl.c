/* fakenccl.c: a fake libnccl.so.2 for running backend/nccl on a machine
 * without a GPU (scripts/nccl-check.sh builds it). It implements the
 * subset of NCCL goccl calls (goccl_nccl.h) for ranks that are processes
 * (or threads) on one host, over host memory, beside the fake CUDA of
 * device/cuda/compat/fakecuda, whose "device memory" is host memory.
 *
 * A communicator is a shared-memory segment named after its unique id:
 * a header (a barrier's arrival count, an abort flag), a slot of SLOT
 * bytes per rank for the collectives, and a mailbox of SLOT bytes per
 * ordered pair of ranks for sends and receives. Each communicator has a
 * worker thread that runs its calls in order, each in chunks of SLOT:
 * every rank copies its part into its slot, a barrier, every rank reads
 * the slots it needs, a barrier. Grouped sends and receives progress
 * together (a sender fills an empty mailbox, a receiver empties a full
 * one), so that exchanges in any order complete.
 *
 * Streams: where the process has the CUDA driver (the fake one), a call
 * records an event on the caller's stream, which the worker waits for
 * before it starts, and the stream then waits (cuStreamWaitValue32) for a
 * word the worker sets when the call is done: the stream's order is kept
 * as NCCL keeps it, with nothing synchronized on the host.
 *
 * ncclCommAbort ends this rank's waits: its calls fail (ncclRemoteError,
 * by ncclCommGetAsyncError) and its streams go on; the other ranks wait
 * on, as they would on NCCL, until their own deadlines abort them. GOCCL_FAKENCCL_VERSION sets the version it reports (for
 * example 20903, an NCCL without ncclAvg). It proves nothing about NCCL
 * itself, only that goccl drives the API as documented. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../goccl_nccl.h"

#define SLOT (1 << 20)
#define MAXRANKS 64

typedef struct {
	uint64_t count; /* barrier arrivals, never reset */
	int abort;
	int n;
} hdr;

typedef struct {
	uint64_t sent, taken, len;
} mbox;

/* --- the CUDA driver, where the process has one --- */
typedef int (*ev_create_t)(void **, unsigned);
typedef int (*ev_record_t)(void *, void *);
typedef int (*ev_query_t)(void *);
typedef int (*wait_value_t)(void *, unsigned long long, uint32_t, unsigned);
static ev_create_t cu_ev_create;
static ev_record_t cu_ev_record;
static ev_query_t cu_ev_query;
static wait_value_t cu_wait_value;
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static void cu_load(void) {
	cu_ev_create = (ev_create_t)dlsym(RTLD_DEFAULT, "cuEventCreate");
	cu_ev_record = (ev_record_t)dlsym(RTLD_DEFAULT, "cuEventRecord");
	cu_ev_query = (ev_query_t)dlsym(RTLD_DEFAULT, "cuEventQuery");
	cu_wait_value = (wait_value_t)dlsym(RTLD_DEFAULT, "cuStreamWaitValue32_v2");
	if (!cu_ev_create || !cu_ev_record || !cu_ev_query || !cu_wait_value) cu_ev_create = NULL;
}

/* --- calls --- */
enum { K_ALLREDUCE = 1, K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCESCATTER, K_P2P, K_SPLIT, K_QUIT };

typedef struct p2p {
	int send; /* 1 send, 0 receive */
	int peer;
	char *buf;
	size_t bytes, done;
} p2p;

typedef struct fop {
	int kind;
	const char *send;
	char *recv;
	size_t count;
	int dt, op, root;
	p2p *ps;
	int nps;
	int color, key;               /* K_SPLIT */
	struct goccl_ncclComm *child; /* K_SPLIT's result */
	void *ev;
	volatile uint32_t done;
	struct fop *next;
} fop;

struct goccl_ncclComm {
	int n, rank;
	char name[96];
	char *base;
	size_t size;
	hdr *h;
	mbox *mb;
	char *slots, *mail;
	char *acc; /* SLOT bytes of scratch */
	uint64_t bar;
	int aborted, err, nsplit;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	fop *head, *tail;
	void *evfree[64];
	int nevfree;
};

static int fake_version(void) {
	const char *v = getenv("GOCCL_FAKENCCL_VERSION");
	return v && *v ? atoi(v) : 22203;
}

ncclResult_t ncclGetVersion(int *v) {
	*v = fake_version();
	return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
	switch (r) {
	case ncclSuccess: return "no error (fake NCCL)";
	case ncclSystemError: return "system error (fake NCCL)";
	case ncclInternalError: return "internal error (fake NCCL)";
	case ncclInvalidArgument: return "invalid argument (fake NCCL)";
	case ncclInvalidUsage: return "invalid usage (fake NCCL)";
	case ncclRemoteError: return "remote process exited or the communicator was aborted (fake NCCL)";
	default: return "unknown result (fake NCCL)";
	}
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
	memset(id, 0, sizeof *id);
	uint64_t r = 0;
	FILE *f = fopen("/dev/urandom", "rb");
	if (!f || fread(&r, sizeof r, 1, f) != 1) r = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
	if (f) fclose(f);
	snprintf(id->internal, sizeof id->internal, "/goccl-fakenccl-%016llx", (unsigned long long)r);
	return ncclSuccess;
}

/* --- waiting --- */
/* broken: c was aborted here. A peer's abort is not seen (its flag in the
 * segment is only a record): as with NCCL, a rank whose peer is gone
 * waits until its own deadline aborts it. */
static int broken(struct goccl_ncclComm *c) { return __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE); }

static void backoff(int *i) {
	if (++*i < 1000) sched_yield();
	else usleep(*i < 5000 ? 5 : 50);
}

/* barrier: 0, or -1 when the communicator was aborted (here or elsewhere). */
static int barrier(struct goccl_ncclComm *c) {
	c->bar++;
	__atomic_add_fetch(&c->h->count, 1, __ATOMIC_ACQ_REL);
	for (int i = 0; __atomic_load_n(&c->h->count, __ATOMIC_ACQUIRE) < c->bar * (uint64_t)c->n; backoff(&i))
		if (broken(c)) return -1;
	return 0;
}

/* --- arithmetic --- */
static size_t dtsize(int dt) {
	switch (dt) {
	case ncclInt8: case ncclUint8: return 1;
	case ncclFloat16: case ncclBfloat16: return 2;
	case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
	case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
	}
	return 0;
}

static float bf2f(uint16_t b) {
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}
static uint16_t f2bf(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7fff + ((u >> 16) & 1); /* round to nearest even */
	return (uint16_t)(u >> 16);
}

#define REDUCE(T, a, b, m, op) \
	do { \
		T *x = (T *)(a); \
		const T *y = (const T *)(b); \
		for (size_t i = 0; i < (m); i++) { \
			switch (op) { \
			case ncclSum: case ncclAvg: x[i] = x[i] + y[i]; break; \
			case ncclProd: x[i] = x[i] * y[i]; break; \
			case ncclMax: x[i] = x[i] > y[i] ? x[i] : y[i]; break; \
			case ncclMin: x[i] = x[i] < y[i] ? x[i] : y[i]; break; \
			} \
		} \
	} while (0)

static void reduce(int dt, int op, void *a, const void *b, size_t m) {
	switch (dt) {
	case ncclInt8: REDUCE(int8_t, a, b, m, op); break;
	case ncclUint8: REDUCE(uint8_t, a, b, m, op); break;
	case ncclInt32: REDUCE(int32_t, a, b, m, op); break;
	case ncclUint32: REDUCE(uint32_t, a, b, m, op); break;
	case ncclInt64: REDUCE(int64_t, a, b, m, op); break;
	case ncclUint64: REDUCE(uint64_t, a, b, m, op); break;
	case ncclFloat32: REDUCE(float, a, b, m, op); break;
	case ncclFloat64: REDUCE(double, a, b, m, op); break;
	case ncclFloat16: REDUCE(_Float16, a, b, m, op); break;
	case ncclBfloat16: {
		uint16_t *x = a;
		const uint16_t *y = b;
		for (size_t i = 0; i < m; i++) {
			float fx = bf2f(x[i]), fy = bf2f(y[i]), r = fx;
			switch (op) {
			case ncclSum: case ncclAvg: r = fx + fy; break;
			case ncclProd: r = fx * fy; break;
			case ncclMax: r = fx > fy ? fx : fy; break;
			case ncclMin: r = fx < fy ? fx : fy; break;
			}
			x[i] = f2bf(r);
		}
		break;
	}
	}
}

#define DIVIDE(T, a, m, n) \
	do { \
		T *x = (T *)(a); \
		for (size_t i = 0; i < (m); i++) x[i] = (T)(x[i] / (n)); \
	} while (0)

static void divide(int dt, void *a, size_t m, int n) {
	switch (dt) {
	case ncclInt8: DIVIDE(int8_t, a, m, n); break;
	case ncclUint8: DIVIDE(uint8_t, a, m, n); break;
	case ncclInt32: DIVIDE(int32_t, a, m, n); break;
	case ncclUint32: DIVIDE(uint32_t, a, m, (uint32_t)n); break;
	case ncclInt64: DIVIDE(int64_t, a, m, n); break;
	case ncclUint64: DIVIDE(uint64_t, a, m, (uint64_t)n); break;
	case ncclFloat32: DIVIDE(float, a, m, (float)n); break;
	case ncclFloat64: DIVIDE(double, a, m, (double)n); break;
	case ncclFloat16: DIVIDE(_Float16, a, m, (_Float16)n); break;
	case ncclBfloat16: {
		uint16_t *x = a;
		for (size_t i = 0; i < m; i++) x[i] = f2bf(bf2f(x[i]) / (float)n);
		break;
	}
	}
}

/* --- the collectives, run by the worker --- */
static char *slot(struct goccl_ncclComm *c, int r) { return c->slots + (size_t)r * SLOT; }

/* allreduce and reduce: every rank's chunk in its slot, then each rank (or
 * the root) reduces the slots in rank order. */
static int run_reduce(struct goccl_ncclComm *c, fop *o, int all) {
	size_t es = dtsize(o->dt), per = SLOT / es;
	for (size_t off = 0; off < o->count; off += per) {
		size_t m = o->count - off < per ? o->count - off : per;
		memcpy(slot(c, c->rank), o->send + off * es, m * es);
		if (barrier(c)) return -1;
		if (all || c->rank == o->root) {
			memcpy(c->acc, slot(c, 0), m * es);
			for (int q = 1; q < c->n; q++) reduce(o->dt, o->op, c->acc, slot(c, q), m);
			if (o->op == ncclAvg) divide(o->dt, c->acc, m, c->n);
			memcpy(o->recv + off * es, c->acc, m * es);
		}
		if (barrier(c)) return -1;
	}
	return 0;
}

static int run_broadcast(struct goccl_ncclComm *c, fop *o) {
	size_t es = dtsize(o->dt), bytes = o->count * es;
	for (size_t off = 0; off < bytes; off += SLOT) {
		size_t m = bytes - off < SLOT ? bytes - off : SLOT;
		if (c->rank == o->root) memcpy(slot(c, o->root), o->send + off, m);
		if (barrier(c)) return -1;
		if (c->rank != o->root) memcpy(o->recv + off, slot(c, o->root), m);
		else if (o->recv != o->send) memmove(o->recv + off, o->send + off, m);
		if (barrier(c)) return -1;
	}
	return 0;
}

static int run_allgather(struct goccl_ncclComm *c, fop *o) {
	size_t es = dtsize(o->dt), bytes = o->count * es;
	for (size_t off = 0; off < bytes; off += SLOT) {
		size_t m = bytes - off < SLOT ? bytes - off : SLOT;
		memcpy(slot(c, c->rank), o->send + off, m);
		if (barrier(c)) return -1;
		for (int q = 0; q < c->n; q++) memcpy(o->recv + q * bytes + off, slot(c, q), m);
		if (barrier(c)) return -1;
	}
	return 0;
}

static int run_reducescatter(struct goccl_ncclComm *c, fop *o) {
	size_t es = dtsize(o->dt), per = SLOT / es / c->n;
	for (size_t off = 0; off < o->count; off += per) {
		size_t m = o->count - off < per ? o->count - off : per;
		for (int q = 0; q < c->n; q++) memcpy(slot(c, c->rank) + q * m * es, o->send + (q * o->count + off) * es, m * es);
		if (barrier(c)) return -1;
		memcpy(c->acc, slot(c, 0) + c->rank * m * es, m * es);
		for (int q = 1; q < c->n; q++) reduce(o->dt, o->op, c->acc, slot(c, q) + c->rank * m * es, m);
		if (o->op == ncclAvg) divide(o->dt, c->acc, m, c->n);
		memcpy(o->recv + off * es, c->acc, m * es);
		if (barrier(c)) return -1;
	}
	return 0;
}

/* run_p2p progresses a group's sends and receives together; those to (or
 * from) one peer go in the order they were made. */
static int run_p2p(struct goccl_ncclComm *c, fop *o) {
	int left = 0;
	for (int i = 0; i < o->nps; i++) left += o->ps[i].bytes > 0;
	for (int spin = 0; left > 0;) {
		int moved = 0;
		for (int i = 0; i < o->nps; i++) {
			p2p *p = &o->ps[i];
			if (p->done == p->bytes) continue;
			int first = 1;
			for (int j = 0; j < i; j++)
				if (o->ps[j].send == p->send && o->ps[j].peer == p->peer && o->ps[j].done < o->ps[j].bytes) first = 0;
			if (!first) continue;
			int s = p->send ? c->rank : p->peer, d = p->send ? p->peer : c->rank;
			mbox *mb = &c->mb[s * c->n + d];
			char *box = c->mail + ((size_t)s * c->n + d) * SLOT;
			uint64_t sent = __atomic_load_n(&mb->sent, __ATOMIC_ACQUIRE), taken = __atomic_load_n(&mb->taken, __ATOMIC_ACQUIRE);
			if (p->send && sent == taken) {
				size_t m = p->bytes - p->done < SLOT ? p->bytes - p->done : SLOT;
				memcpy(box, p->buf + p->done, m);
				mb->len = m;
				__atomic_store_n(&mb->sent, sent + 1, __ATOMIC_RELEASE);
				p->done += m;
				moved = 1;
			} else if (!p->send && sent > taken) {
				size_t m = mb->len;
				if (m > p->bytes - p->done) return -2; /* a longer message than the receive */
				memcpy(p->buf + p->done, box, m);
				__atomic_store_n(&mb->taken, taken + 1, __ATOMIC_RELEASE);
				p->done += m;
				moved = 1;
			}
			if (p->done == p->bytes) left--;
		}
		if (moved) spin = 0;
		else if (broken(c)) return -1;
		else backoff(&spin);
	}
	return 0;
}

static ncclResult_t comm_init(struct goccl_ncclComm **out, int n, const char *name, int rank);

static int run_split(struct goccl_ncclComm *c, fop *o) {
	int *mine = (int *)slot(c, c->rank);
	mine[0] = o->color;
	mine[1] = o->key;
	if (barrier(c)) return -1;
	int n = 0, me = 0;
	for (int q = 0; q < c->n; q++) {
		int *t = (int *)slot(c, q);
		if (o->color < 0 || t[0] != o->color) continue;
		n++;
		if (t[1] < o->key || (t[1] == o->key && q < c->rank)) me++;
	}
	if (barrier(c)) return -1;
	c->nsplit++;
	if (o->color < 0) return 0;
	char name[96];
	snprintf(name, sizeof name, "%.60s-%d-%d", c->name, c->nsplit, o->color);
	return comm_init(&o->child, n, name, me) == ncclSuccess ? 0 : -1;
}

static void *worker(void *arg) {
	struct goccl_ncclComm *c = arg;
	for (;;) {
		pthread_mutex_lock(&c->mu);
		while (!c->head) pthread_cond_wait(&c->cv, &c->mu);
		fop *o = c->head;
		c->head = o->next;
		if (!c->head) c->tail = NULL;
		pthread_mutex_unlock(&c->mu);
		if (o->kind == K_QUIT) {
			__atomic_store_n(&o->done, 1, __ATOMIC_RELEASE);
			return NULL;
		}
		int rc = 0;
		if (o->ev) {
			for (int i = 0; cu_ev_query(o->ev) != 0; backoff(&i))
				if (broken(c)) { rc = -1; break; }
			pthread_mutex_lock(&c->mu);
			if (c->nevfree < 64) c->evfree[c->nevfree++] = o->ev;
			pthread_mutex_unlock(&c->mu);
		}
		if (rc == 0 && broken(c)) rc = -1;
		if (rc == 0) {
			switch (o->kind) {
			case K_ALLREDUCE: rc = run_reduce(c, o, 1); break;
			case K_REDUCE: rc = run_reduce(c, o, 0); break;
			case K_BROADCAST: rc = run_broadcast(c, o); break;
			case K_ALLGATHER: rc = run_allgather(c, o); break;
			case K_REDUCESCATTER: rc = run_reducescatter(c, o); break;
			case K_P2P: rc = run_p2p(c, o); break;
			case K_SPLIT: rc = run_split(c, o); break;
			}
		}
		if (rc != 0 && !__atomic_load_n(&c->err, __ATOMIC_ACQUIRE))
			__atomic_store_n(&c->err, rc == -2 ? ncclInvalidUsage : ncclRemoteError, __ATOMIC_RELEASE);
		__atomic_store_n(&o->done, 1, __ATOMIC_RELEASE); /* the stream goes on, even after an error */
	}
}

/* submit queues o on c's worker, ordered on stream s (NULL: none). */
static ncclResult_t submit(struct goccl_ncclComm *c, fop *o, cudaStream_t s) {
	if (__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE)) return ncclInvalidUsage;
	pthread_once(&cu_once, cu_load);
	if (s && cu_ev_create) {
		pthread_mutex_lock(&c->mu);
		o->ev = c->nevfree > 0 ? c->evfree[--c->nevfree] : NULL;
		pthread_mutex_unlock(&c->mu);
		if (!o->ev && cu_ev_create(&o->ev, 0) != 0) return ncclUnhandledCudaError;
		if (cu_ev_record(o->ev, s) != 0) return ncclUnhandledCudaError;
	}
	pthread_mutex_lock(&c->mu);
	if (c->tail) c->tail->next = o;
	else c->head = o;
	c->tail = o;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	if (s && cu_ev_create && cu_wait_value(s, (unsigned long long)(uintptr_t)&o->done, 1, 0) != 0) return ncclUnhandledCudaError;
	return ncclSuccess;
}

static ncclResult_t comm_init(struct goccl_ncclComm **out, int n, const char *name, int rank) {
	*out = NULL;
	if (n < 1 || n > MAXRANKS || rank < 0 || rank >= n) return ncclInvalidArgument;
	struct goccl_ncclComm *c = calloc(1, sizeof *c);
	c->n = n;
	c->rank = rank;
	snprintf(c->name, sizeof c->name, "%s", name);
	size_t head = 4096, mbs = ((size_t)n * n * sizeof(mbox) + 4095) / 4096 * 4096;
	c->size = head + mbs + (size_t)n * SLOT + (size_t)n * n * SLOT;
	int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)c->size) != 0) {
		if (fd >= 0) close(fd);
		free(c);
		return ncclSystemError;
	}
	c->base = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (c->base == MAP_FAILED) {
		free(c);
		return ncclSystemError;
	}
	c->h = (hdr *)c->base;
	c->mb = (mbox *)(c->base + head);
	c->slots = c->base + head + mbs;
	c->mail = c->slots + (size_t)n * SLOT;
	c->acc = malloc(SLOT);
	c->h->n = n;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	if (barrier(c) != 0) return ncclRemoteError; /* every rank has the segment mapped */
	if (rank == 0) shm_unlink(name);
	pthread_create(&c->th, NULL, worker, c);
	*out = c;
	return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int n, ncclUniqueId id, int rank) {
	id.internal[GOCCL_NCCL_ID_BYTES - 1] = 0;
	if (strncmp(id.internal, "/goccl-fakenccl-", 16) != 0) return ncclInvalidArgument;
	return comm_init(comm, n, id.internal, rank);
}

ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *out, void *config) {
	(void)config;
	*out = NULL;
	fop *o = calloc(1, sizeof *o);
	o->kind = K_SPLIT;
	o->color = color;
	o->key = key;
	ncclResult_t rc = submit(c, o, NULL);
	if (rc != ncclSuccess) return rc;
	for (int i = 0; !__atomic_load_n(&o->done, __ATOMIC_ACQUIRE); backoff(&i))
		;
	if (c->err) return c->err;
	*out = o->child;
	return color >= 0 && !o->child ? ncclSystemError : ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e) {
	*e = (ncclResult_t)__atomic_load_n(&c->err, __ATOMIC_ACQUIRE);
	return ncclSuccess;
}

/* stop ends c's worker: queued calls run first, or fail at once if c was
 * aborted. c's memory stays (streams may still read the calls' words). */
static void stop(struct goccl_ncclComm *c) {
	fop *q = calloc(1, sizeof *q);
	q->kind = K_QUIT;
	pthread_mutex_lock(&c->mu);
	if (c->tail) c->tail->next = q;
	else c->head = q;
	c->tail = q;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->th, NULL);
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
	if (!c) return ncclSuccess;
	__atomic_store_n(&c->aborted, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&c->h->abort, 1, __ATOMIC_RELEASE);
	stop(c);
	return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
	if (!c) return ncclSuccess;
	stop(c);
	return ncclSuccess;
}

/* --- the calls --- */
static fop *newop(int kind, const void *send, void *recv, size_t count, ncclDataType_t dt, int op, int root) {
	fop *o = calloc(1, sizeof *o);
	o->kind = kind;
	o->send = send;
	o->recv = recv;
	o->count = count;
	o->dt = dt;
	o->op = op;
	o->root = root;
	return o;
}

static int bad(ncclComm_t c, ncclDataType_t dt, int root) { return !c || !dtsize(dt) || root < 0 || root >= c->n; }

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c, cudaStream_t st) {
	if (bad(c, dt, 0) || op < ncclSum || op > ncclAvg || (op == ncclAvg && fake_version() < 21000)) return ncclInvalidArgument;
	return submit(c, newop(K_ALLREDUCE, s, r, n, dt, op, 0), st);
}
ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st) {
	if (bad(c, dt, root)) return ncclInvalidArgument;
	return submit(c, newop(K_BROADCAST, s, r, n, dt, 0, root), st);
}
ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t st) {
	if (bad(c, dt, root) || op < ncclSum || op > ncclAvg || (op == ncclAvg && fake_version() < 21000)) return ncclInvalidArgument;
	return submit(c, newop(K_REDUCE, s, r, n, dt, op, root), st);
}
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st) {
	if (bad(c, dt, 0)) return ncclInvalidArgument;
	return submit(c, newop(K_ALLGATHER, s, r, n, dt, 0, 0), st);
}
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c, cudaStream_t st) {
	if (bad(c, dt, 0) || op < ncclSum || op > ncclAvg || (op == ncclAvg && fake_version() < 21000)) return ncclInvalidArgument;
	return submit(c, newop(K_REDUCESCATTER, s, r, n, dt, op, 0), st);
}

/* Sends and receives between ncclGroupStart and ncclGroupEnd run as one
 * call; alone, each is a call of its own. */
static __thread int group_depth;
static __thread fop *group_op;
static __thread ncclComm_t group_comm;
static __thread cudaStream_t group_stream;

ncclResult_t ncclGroupStart(void) {
	group_depth++;
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
	if (group_depth == 0) return ncclInvalidUsage;
	if (--group_depth > 0 || !group_op) return ncclSuccess;
	fop *o = group_op;
	group_op = NULL;
	return submit(group_comm, o, group_stream);
}

static ncclResult_t p2p_call(int send, void *buf, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
	if (bad(c, dt, peer)) return ncclInvalidArgument;
	if (group_op && (group_comm != c || group_stream != st)) return ncclInvalidUsage; /* one communicator and stream a group, here */
	if (!group_op) {
		group_op = newop(K_P2P, NULL, NULL, 0, dt, 0, 0);
		group_comm = c;
		group_stream = st;
	}
	fop *o = group_op;
	o->ps = realloc(o->ps, (size_t)(o->nps + 1) * sizeof(p2p));
	o->ps[o->nps++] = (p2p){.send = send, .peer = peer, .buf = buf, .bytes = n * dtsize(dt)};
	if (group_depth == 0) {
		group_op = NULL;
		return submit(c, o, st);
	}
	return ncclSuccess;
}

ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
	return p2p_call(1, (void *)s, n, dt, peer, c, st);
}
ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
	return p2p_call(0, r, n, dt, peer, c, st);
}
