/* uccl.h: the C API of uccl, for C and C++ programs and other runtimes.
 *
 * Why a C API: a stable ABI that any language can bind (no C++ types cross it). Stability
 * rules: handles are opaque pointers; structs passed in start with their own size (fields are
 * only ever appended); enum values are never renumbered; UCCL_VERSION_CODE says what a program
 * was compiled against and uccl_get_version() what it runs with.
 *
 * Contract:
 *   - Every call returns a uccl_result_t. On failure, uccl_last_error() (per thread) holds the
 *     message, which names the operation and the peer ("all_reduce #12: rank 3 (host b,
 *     10.0.0.2:41234) closed the connection"), and uccl_last_error_peer() the rank (-1 if none).
 *   - Collectives and p2p take a `uccl_request_t* request`: NULL means blocking (returns when the
 *     operation finished); otherwise the call returns at once and the request is completed with
 *     uccl_test / uccl_wait and released with uccl_request_free. Buffers stay untouched by the
 *     caller until then. Operations complete in issue order; every rank issues the same ones.
 *   - send == recv means in place where the collective allows it (include/uccl/args.h); buffers
 *     that overlap any other way are refused with UCCL_ERR_INVALID_ARGUMENT. Counts are in elements.
 *   - Nothing hangs forever: waits end at the communicator's timeout (UCCL_TIMEOUT_S or
 *     uccl_config_t.timeout_s) with UCCL_ERR_TIMEOUT; a dead peer is UCCL_ERR_REMOTE.
 *   - Thread safety: calls on one communicator from several threads are serialized by uccl;
 *     issue order is then the order in which the calls entered.
 *
 * Rendezvous, like NCCL: one process calls uccl_get_unique_id (it serves a small TCP store)
 * and ships the id to every rank (MPI_Bcast, a file...), then every rank calls
 * uccl_comm_init_rank. Or every rank calls uccl_comm_init_store with one store address (rank 0
 * serves it there), as with MASTER_ADDR/MASTER_PORT.
 */
#ifndef UCCL_UCCL_H_
#define UCCL_UCCL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UCCL_VERSION_MAJOR 0
#define UCCL_VERSION_MINOR 1
#define UCCL_VERSION_PATCH 0
#define UCCL_VERSION_CODE (UCCL_VERSION_MAJOR * 10000 + UCCL_VERSION_MINOR * 100 + UCCL_VERSION_PATCH)

typedef struct uccl_comm* uccl_comm_t;       /* a communicator */
typedef struct uccl_request* uccl_request_t; /* an asynchronous operation */

#define UCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[UCCL_UNIQUE_ID_BYTES];
} uccl_unique_id;

typedef enum {
  UCCL_SUCCESS = 0,
  UCCL_ERR_INVALID_ARGUMENT = 1, /* wrong size, dtype, rank, root, NULL pointer */
  UCCL_ERR_NOT_SUPPORTED = 2,
  UCCL_ERR_TIMEOUT = 3,
  UCCL_ERR_REMOTE = 4,   /* a peer died, closed its connection, or sent garbage */
  UCCL_ERR_MISMATCH = 5, /* ranks issued different operations in the same slot */
  UCCL_ERR_ABORTED = 6,  /* uccl_comm_abort was called */
  UCCL_ERR_SYSTEM = 7,   /* a local system call failed */
  UCCL_ERR_INTERNAL = 8,
  UCCL_IN_PROGRESS = 9, /* uccl_test: not finished yet (not an error) */
  UCCL_ERR_UNAUTHENTICATED = 10 /* the job key was refused (UCCL_JOB_KEY differs, or is missing) */
} uccl_result_t;

typedef enum {
  uccl_int8 = 0,
  uccl_uint8 = 1,
  uccl_int32 = 2,
  uccl_int64 = 3,
  uccl_float16 = 4,
  uccl_bfloat16 = 5,
  uccl_float32 = 6,
  uccl_float64 = 7
} uccl_datatype_t;

typedef enum {
  uccl_sum = 0,
  uccl_prod = 1,
  uccl_min = 2,
  uccl_max = 3,
  uccl_avg = 4,
  uccl_band = 6, /* integer types only */
  uccl_bor = 7,
  uccl_bxor = 8
} uccl_red_op_t;

/* Options of a new communicator. Start from UCCL_CONFIG_INITIALIZER; NULL means defaults. */
typedef struct {
  size_t size;               /* sizeof(uccl_config_t) */
  double timeout_s;          /* < 0: UCCL_TIMEOUT_S */
  const char* transport;     /* NULL, "auto", "tcp", "shm" */
  const char* algorithm;     /* NULL, "auto", "ring", "direct", ... */
  const char* socket_ifname; /* NULL or UCCL_SOCKET_IFNAME syntax */
  const char* name;          /* shown in logs */
} uccl_config_t;
#define UCCL_CONFIG_INITIALIZER {sizeof(uccl_config_t), -1.0, NULL, NULL, NULL, NULL}

/* One point-to-point operation of a batch (uccl_p2p). */
typedef struct {
  int is_send;
  void* buf;
  size_t count;
  uccl_datatype_t datatype;
  int peer;
  uint32_t tag;
} uccl_p2p_op_t;

/* ---- version and errors ---- */
int uccl_get_version(void); /* UCCL_VERSION_CODE of the library that runs */
const char* uccl_error_string(uccl_result_t result);
const char* uccl_last_error(void);   /* this thread's last failure message ("" if none) */
int uccl_last_error_peer(void);      /* the peer of that failure, or -1 */

/* ---- communicators ---- */
uccl_result_t uccl_get_unique_id(uccl_unique_id* id);
uccl_result_t uccl_comm_init_rank(uccl_comm_t* comm, int nranks, const uccl_unique_id* id, int rank,
                                  const uccl_config_t* config);
/* Rank 0 serves uccl's TCP store on port (all addresses); every rank connects to host:port. */
uccl_result_t uccl_comm_init_store(uccl_comm_t* comm, int nranks, int rank, const char* host, int port,
                                   const uccl_config_t* config);
/* Collective: ranks with the same color form *newcomm, ordered by (key, rank); color < 0 gives
 * *newcomm = NULL. */
uccl_result_t uccl_comm_split(uccl_comm_t comm, int color, int key, uccl_comm_t* newcomm,
                              const uccl_config_t* config);
uccl_result_t uccl_comm_abort(uccl_comm_t comm); /* fails pending and future operations */
/* Fault tolerance (Communicator::shrink, include/uccl/communicator.h): collective over the
 * survivors of a failure; they agree on the failed ranks and get *newcomm of the survivors, ranks
 * renumbered in order (comm is aborted; destroy it when done). UCCL_ERR_ABORTED on a rank that
 * the others excluded (it did not answer within the timeout). */
uccl_result_t uccl_comm_shrink(uccl_comm_t comm, uccl_comm_t* newcomm, const uccl_config_t* config);
/* The same with the ranks to leave out named (Communicator::shrink_excluding; every survivor passes
 * the same list, ncclCommShrink's excludeRanksList): they need not call and may be alive. *newcomm
 * is exactly the other ranks: when another rank failed too, UCCL_ERR_REMOTE names it
 * (uccl_last_error_peer) and nothing is formed; call again with it in the list. */
uccl_result_t uccl_comm_shrink_excluding(uccl_comm_t comm, const int* exclude, int nexclude, uccl_comm_t* newcomm,
                                         const uccl_config_t* config);
/* Elasticity: every rank of comm calls uccl_comm_grow with the same new_size (>= its size) and tag;
 * new_size - size processes call uccl_comm_join with the same tag and comm's store address (the
 * host:port of uccl_comm_init_store). All get *newcomm of new_size ranks (joiners numbered after the
 * current ranks in order of arrival). UCCL_ERR_MISMATCH names a library version, protocol, job
 * key mode or transport setting that differs. On rank 0 the store it serves moves to *newcomm. */
uccl_result_t uccl_comm_grow(uccl_comm_t comm, int new_size, const char* tag, uccl_comm_t* newcomm,
                             const uccl_config_t* config);
uccl_result_t uccl_comm_join(const char* host, int port, const char* tag, uccl_comm_t* newcomm,
                             const uccl_config_t* config);
uccl_result_t uccl_comm_destroy(uccl_comm_t comm);
uccl_result_t uccl_comm_rank(uccl_comm_t comm, int* rank);
uccl_result_t uccl_comm_size(uccl_comm_t comm, int* size);
uccl_result_t uccl_comm_error(uccl_comm_t comm); /* the error that failed it, or UCCL_SUCCESS */

/* ---- collectives (request NULL = blocking) ---- */
uccl_result_t uccl_all_reduce(const void* send, void* recv, size_t count, uccl_datatype_t datatype,
                              uccl_red_op_t op, uccl_comm_t comm, uccl_request_t* request);
uccl_result_t uccl_reduce(const void* send, void* recv, size_t count, uccl_datatype_t datatype, uccl_red_op_t op,
                          int root, uccl_comm_t comm, uccl_request_t* request);
uccl_result_t uccl_broadcast(const void* send, void* recv, size_t count, uccl_datatype_t datatype, int root,
                             uccl_comm_t comm, uccl_request_t* request);
/* recv holds nranks * count elements */
uccl_result_t uccl_all_gather(const void* send, void* recv, size_t count, uccl_datatype_t datatype,
                              uccl_comm_t comm, uccl_request_t* request);
/* recv_displs may be NULL (packed) */
uccl_result_t uccl_all_gather_v(const void* send, void* recv, const size_t* recv_counts, const size_t* recv_displs,
                                uccl_datatype_t datatype, uccl_comm_t comm, uccl_request_t* request);
/* send holds nranks * recv_count elements */
uccl_result_t uccl_reduce_scatter(const void* send, void* recv, size_t recv_count, uccl_datatype_t datatype,
                                  uccl_red_op_t op, uccl_comm_t comm, uccl_request_t* request);
uccl_result_t uccl_reduce_scatter_v(const void* send, void* recv, const size_t* recv_counts,
                                    uccl_datatype_t datatype, uccl_red_op_t op, uccl_comm_t comm,
                                    uccl_request_t* request);
/* count elements per peer; send and recv hold nranks * count */
uccl_result_t uccl_all_to_all(const void* send, void* recv, size_t count, uccl_datatype_t datatype,
                              uccl_comm_t comm, uccl_request_t* request);
/* displacement arrays may be NULL (packed) */
uccl_result_t uccl_all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                                const size_t* recv_counts, const size_t* recv_displs, uccl_datatype_t datatype,
                                uccl_comm_t comm, uccl_request_t* request);
uccl_result_t uccl_gather(const void* send, void* recv, size_t count, uccl_datatype_t datatype, int root,
                          uccl_comm_t comm, uccl_request_t* request);
uccl_result_t uccl_scatter(const void* send, void* recv, size_t count, uccl_datatype_t datatype, int root,
                           uccl_comm_t comm, uccl_request_t* request);
uccl_result_t uccl_barrier(uccl_comm_t comm, uccl_request_t* request);
/* Blocking; names who did not come (Communicator::monitored_barrier, Gloo's monitoredBarrier): on
 * rank 0 UCCL_ERR_TIMEOUT with uccl_last_error_peer() the lowest rank that did not arrive within
 * timeout_s (< 0: the communicator's), the message naming all of them if wait_all_ranks. */
uccl_result_t uccl_monitored_barrier(uccl_comm_t comm, double timeout_s, int wait_all_ranks);

/* Predicted seconds of a collective as this communicator would run it now (Communicator::estimate:
 * the algorithm it would choose, on its topology and link rates); nothing runs and no peer is
 * asked. collective: "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
 * "all_to_all", "gather", "scatter", "barrier" or a "_v" form; nbytes: the full vector (the gathered
 * output of all_gather / gather, the reduced vector, scatter's whole input, one rank's send
 * buffer of all_to_all). */
uccl_result_t uccl_estimate(uccl_comm_t comm, const char* collective, size_t nbytes, int root, double* seconds);

/* ---- point to point ---- */
uccl_result_t uccl_send(const void* buf, size_t count, uccl_datatype_t datatype, int peer, uccl_comm_t comm,
                        uccl_request_t* request);
uccl_result_t uccl_recv(void* buf, size_t count, uccl_datatype_t datatype, int peer, uccl_comm_t comm,
                        uccl_request_t* request);
/* Posts all ops together (no ordering deadlock between them). A send may overlap a receive of
 * the same call (in place, like MPI_Sendrecv_replace: it is sent from a copy); two receives must
 * not overlap (UCCL_ERR_INVALID_ARGUMENT). */
uccl_result_t uccl_p2p(const uccl_p2p_op_t* ops, int n, uccl_comm_t comm, uccl_request_t* request);

/* ---- requests ---- */
/* UCCL_SUCCESS when done, UCCL_IN_PROGRESS while pending, the error once failed. */
uccl_result_t uccl_test(uccl_request_t request);
/* timeout_s < 0: the communicator's timeout. */
uccl_result_t uccl_wait(uccl_request_t request, double timeout_s);
uccl_result_t uccl_request_free(uccl_request_t request); /* a pending request finishes in the background */

#ifdef __cplusplus
}
#endif

#endif /* UCCL_UCCL_H_ */
