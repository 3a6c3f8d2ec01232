/* The C API from C: every collective against known results, requests, split, and the error
 * paths. Run by tests/test_capi.py as `capi_test SCENARIO RANK SIZE PORT` in SIZE processes
 * (rank 0 serves the store on 127.0.0.1:PORT). Prints "CAPI-OK <checks>" on success; exit 1 with
 * the failed checks otherwise.
 *
 * Scenarios: "collectives" (every collective, async requests, split), "errors" (bad arguments:
 * bad rank, wrong sizes, bad enums, NULL handles), "dead-peer" (rank SIZE-1 dies: the others get
 * UCCL_ERR_REMOTE naming it, then UCCL_ERR_REMOTE again from the failed communicator), "shrink"
 * (rank 0, which serves the store, dies: the others shrink and all_reduce exactly on the new
 * communicator), "shrink-excluding" (rank SIZE-1 dies, rank 1 leaves alive: the others shrink
 * naming both), "grow" (ranks 0..SIZE-2 grow their communicator by rank SIZE-1, which joins). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uccl/uccl.h>

static int failures = 0, checks = 0, me = 0;

#define CHECK(cond, ...)                                    \
  do {                                                      \
    ++checks;                                               \
    if (!(cond)) {                                          \
      ++failures;                                           \
      fprintf(stderr, "rank %d: %s:%d: ", me, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                         \
      fprintf(stderr, "\n");                                \
    }                                                       \
  } while (0)
#define OK(call)                                                                              \
  do {                                                                                        \
    uccl_result_t _r = (call);                                                                \
    CHECK(_r == UCCL_SUCCESS, "%s -> %s: %s", #call, uccl_error_string(_r), uccl_last_error()); \
  } while (0)

static void collectives(uccl_comm_t comm, int n) {
  enum { C = 6 };
  float x[C], y[C], big[64], out[64];
  int i, r;
  for (i = 0; i < C; ++i) x[i] = (float)(me + i);
  OK(uccl_all_reduce(x, y, C, uccl_float32, uccl_sum, comm, NULL));
  for (i = 0; i < C; ++i) CHECK(y[i] == n * (n - 1) / 2.0f + n * i, "all_reduce sum [%d] = %g", i, y[i]);
  OK(uccl_all_reduce(x, y, C, uccl_float32, uccl_max, comm, NULL));
  CHECK(y[0] == n - 1, "all_reduce max = %g", y[0]);
  {
    int64_t v = me + 1, p = 0;
    OK(uccl_all_reduce(&v, &p, 1, uccl_int64, uccl_prod, comm, NULL));
    int64_t want = 1;
    for (r = 1; r <= n; ++r) want *= r;
    CHECK(p == want, "all_reduce prod int64 = %lld", (long long)p);
  }
  memcpy(y, x, sizeof x);
  OK(uccl_reduce(y, y, C, uccl_float32, uccl_min, 1 % n, comm, NULL));
  if (me == 1 % n) CHECK(y[2] == 2.0f, "reduce min at root = %g", y[2]);
  for (i = 0; i < C; ++i) y[i] = me == 0 ? 42.0f : 0.0f;
  OK(uccl_broadcast(y, y, C, uccl_float32, 0, comm, NULL));
  CHECK(y[C - 1] == 42.0f, "broadcast = %g", y[C - 1]);
  OK(uccl_all_gather(x, out, 2, uccl_float32, comm, NULL));
  for (r = 0; r < n; ++r) CHECK(out[2 * r + 1] == r + 1.0f, "all_gather block %d = %g", r, out[2 * r + 1]);
  for (i = 0; i < 2 * n; ++i) big[i] = (float)i;
  OK(uccl_reduce_scatter(big, y, 2, uccl_float32, uccl_sum, comm, NULL));
  CHECK(y[1] == n * (2.0f * me + 1), "reduce_scatter = %g", y[1]);
  for (i = 0; i < n; ++i) big[i] = (float)(10 * me + i);
  OK(uccl_all_to_all(big, out, 1, uccl_float32, comm, NULL));
  for (r = 0; r < n; ++r) CHECK(out[r] == 10.0f * r + me, "all_to_all from %d = %g", r, out[r]);
  OK(uccl_gather(x, out, 1, uccl_float32, n - 1, comm, NULL));
  if (me == n - 1)
    for (r = 0; r < n; ++r) CHECK(out[r] == (float)r, "gather from %d = %g", r, out[r]);
  for (i = 0; i < n; ++i) big[i] = 100.0f + i;
  OK(uccl_scatter(big, y, 1, uccl_float32, 0, comm, NULL));
  CHECK(y[0] == 100.0f + me, "scatter = %g", y[0]);
  {
    size_t counts[64], total = 0;
    for (r = 0; r < n; ++r) total += counts[r] = (size_t)r + 1;
    for (i = 0; i <= me; ++i) big[i] = (float)me;
    OK(uccl_all_gather_v(big, out, counts, NULL, uccl_float32, comm, NULL));
    CHECK(out[total - 1] == (float)(n - 1), "all_gather_v last = %g", out[total - 1]);
    for (i = 0; i < (int)total; ++i) big[i] = 1.0f;
    OK(uccl_reduce_scatter_v(big, out, counts, uccl_float32, uccl_sum, comm, NULL));
    CHECK(out[me] == (float)n, "reduce_scatter_v = %g", out[me]);
    size_t ones[64];
    for (r = 0; r < n; ++r) ones[r] = 1, big[r] = (float)(me * n + r);
    OK(uccl_all_to_all_v(big, ones, NULL, out, ones, NULL, uccl_float32, comm, NULL));
    for (r = 0; r < n; ++r) CHECK(out[r] == (float)(r * n + me), "all_to_all_v from %d = %g", r, out[r]);
  }
  /* p2p ring, both directions posted together */
  {
    double s = me, got = -1;
    uccl_p2p_op_t ops[2] = {{1, &s, 1, uccl_float64, (me + 1) % n, 7}, {0, &got, 1, uccl_float64, (me + n - 1) % n, 7}};
    OK(uccl_p2p(ops, 2, comm, NULL));
    CHECK(got == (me + n - 1) % n, "p2p ring got %g", got);
    if (me == 0 && n > 1) OK(uccl_send(&s, 1, uccl_float64, n - 1, comm, NULL));
    if (me == n - 1 && n > 1) {
      OK(uccl_recv(&got, 1, uccl_float64, 0, comm, NULL));
      CHECK(got == 0.0, "send/recv got %g", got);
    }
  }
  /* async requests: issue two, test, wait */
  {
    float a[C], b[C];
    uccl_request_t r1 = NULL, r2 = NULL;
    memcpy(a, x, sizeof x);
    OK(uccl_all_reduce(a, a, C, uccl_float32, uccl_sum, comm, &r1));
    OK(uccl_all_reduce(x, b, C, uccl_float32, uccl_avg, comm, &r2));
    uccl_result_t t = uccl_test(r1);
    CHECK(t == UCCL_SUCCESS || t == UCCL_IN_PROGRESS, "uccl_test -> %s", uccl_error_string(t));
    OK(uccl_wait(r1, 60));
    OK(uccl_wait(r2, 60));
    CHECK(uccl_test(r2) == UCCL_SUCCESS, "uccl_test after wait");
    CHECK(a[0] == n * (n - 1) / 2.0f, "async all_reduce = %g", a[0]);
    CHECK(b[0] == (n - 1) / 2.0f, "async avg = %g", b[0]);
    OK(uccl_request_free(r1));
    OK(uccl_request_free(r2));
  }
  /* split: evens and odds */
  {
    uccl_comm_t half = NULL;
    int hr = -1, hs = -1, v = 1, sum = 0;
    OK(uccl_comm_split(comm, me % 2, me, &half, NULL));
    CHECK(half != NULL, "split gave NULL");
    if (half) {
      OK(uccl_comm_rank(half, &hr));
      OK(uccl_comm_size(half, &hs));
      CHECK(hr == me / 2 && hs == (n + 1 - me % 2) / 2, "split rank %d size %d", hr, hs);
      OK(uccl_all_reduce(&v, &sum, 1, uccl_int32, uccl_sum, half, NULL));
      CHECK(sum == hs, "all_reduce in split = %d", sum);
      OK(uccl_comm_destroy(half));
    }
  }
  OK(uccl_barrier(comm, NULL));
  OK(uccl_monitored_barrier(comm, 30, 1)); /* everyone arrives */
  OK(uccl_monitored_barrier(comm, -1, 0)); /* the communicator's timeout */
  /* estimates: local predictions, more bytes take longer; names checked */
  {
    double t1 = -1, t2 = -1;
    OK(uccl_estimate(comm, "all_reduce", 1 << 20, 0, &t1));
    OK(uccl_estimate(comm, "all_reduce", 64 << 20, 0, &t2));
    CHECK(n == 1 ? t1 == 0 && t2 == 0 : t1 > 0 && t2 > t1, "estimates %g %g", t1, t2);
    uccl_result_t r = uccl_estimate(comm, "allreduce", 8, 0, &t1);
    CHECK(r == UCCL_ERR_INVALID_ARGUMENT && strstr(uccl_last_error(), "unknown collective 'allreduce'"),
          "bad collective name -> %s: %s", uccl_error_string(r), uccl_last_error());
    r = uccl_estimate(comm, "broadcast", 8, n, &t1);
    CHECK(r == UCCL_ERR_INVALID_ARGUMENT, "bad estimate root -> %s", uccl_error_string(r));
  }
}

static void errors(uccl_comm_t comm, int n) {
  float x[8] = {0}, y[8];
  uccl_comm_t bad = (uccl_comm_t)1;
  uccl_result_t r = uccl_comm_init_store(&bad, n, n + 3, "127.0.0.1", 1, NULL);
  CHECK(r == UCCL_ERR_INVALID_ARGUMENT && bad == NULL, "bad rank -> %s", uccl_error_string(r));
  CHECK(strstr(uccl_last_error(), "rank") != NULL, "bad rank message: %s", uccl_last_error());
  r = uccl_all_reduce(x, y, 8, (uccl_datatype_t)42, uccl_sum, comm, NULL);
  CHECK(r == UCCL_ERR_INVALID_ARGUMENT && strstr(uccl_last_error(), "datatype 42"), "bad dtype: %s", uccl_last_error());
  r = uccl_all_reduce(x, y, 8, uccl_float32, (uccl_red_op_t)77, comm, NULL);
  CHECK(r == UCCL_ERR_INVALID_ARGUMENT, "bad op -> %s", uccl_error_string(r));
  r = uccl_all_reduce(x, y, 8, uccl_float32, uccl_sum, NULL, NULL);
  CHECK(r == UCCL_ERR_INVALID_ARGUMENT && strstr(uccl_last_error(), "comm is NULL"), "NULL comm: %s", uccl_last_error());
  r = uccl_broadcast(x, x, 8, uccl_float32, n + 5, comm, NULL);
  CHECK(r == UCCL_ERR_INVALID_ARGUMENT, "bad root -> %s: %s", uccl_error_string(r), uccl_last_error());
  r = uccl_send(x, 8, uccl_float32, n, comm, NULL);
  CHECK(r == UCCL_ERR_INVALID_ARGUMENT, "bad peer -> %s: %s", uccl_error_string(r), uccl_last_error());
  r = uccl_all_reduce(x, y, 8, uccl_float32, uccl_band, comm, NULL);
  CHECK(r == UCCL_ERR_INVALID_ARGUMENT, "band on float32 -> %s", uccl_error_string(r));
  /* wrong sizes: ranks pass different counts -> every rank gets MISMATCH naming a peer */
  r = uccl_all_reduce(x, y, (size_t)(4 + me), uccl_float32, uccl_sum, comm, NULL);
  CHECK(r == UCCL_ERR_MISMATCH, "different counts -> %s: %s", uccl_error_string(r), uccl_last_error());
  CHECK(uccl_last_error_peer() >= 0, "mismatch names no peer: %s", uccl_last_error());
  uccl_unique_id id;
  memset(&id, 'x', sizeof id);
  r = uccl_comm_init_rank(&bad, n, &id, 0, NULL);
  CHECK(r == UCCL_ERR_INVALID_ARGUMENT, "garbage id -> %s", uccl_error_string(r));
  CHECK(strcmp(uccl_error_string(UCCL_ERR_REMOTE), "remote error (a peer failed)") == 0, "error string");
  CHECK(uccl_get_version() == UCCL_VERSION_CODE, "version %d != %d", uccl_get_version(), UCCL_VERSION_CODE);
}

static void dead_peer(uccl_comm_t comm, int n) {
  float x[1024] = {0};
  OK(uccl_all_reduce(x, x, 1024, uccl_float32, uccl_sum, comm, NULL)); /* everyone connected */
  if (me == n - 1) raise(SIGKILL);
  uccl_result_t r = uccl_all_reduce(x, x, 1024, uccl_float32, uccl_sum, comm, NULL);
  char want[32];
  snprintf(want, sizeof want, "rank %d", n - 1);
  CHECK(r == UCCL_ERR_REMOTE, "after the death -> %s: %s", uccl_error_string(r), uccl_last_error());
  CHECK(strstr(uccl_last_error(), want) != NULL, "message does not name %s: %s", want, uccl_last_error());
  CHECK(uccl_last_error_peer() >= 0, "no peer: %s", uccl_last_error());
  r = uccl_barrier(comm, NULL);
  CHECK(r != UCCL_SUCCESS, "a failed communicator accepted a barrier");
}

static void shrink(uccl_comm_t comm, int n) {
  float x[1024] = {0};
  uccl_comm_t newcomm = NULL;
  int nr = -1, ns = -1, i;
  OK(uccl_all_reduce(x, x, 1024, uccl_float32, uccl_sum, comm, NULL)); /* the first step */
  if (me == 0) raise(SIGKILL);
  uccl_result_t r = uccl_all_reduce(x, x, 1024, uccl_float32, uccl_sum, comm, NULL);
  CHECK(r == UCCL_ERR_REMOTE, "after the death -> %s: %s", uccl_error_string(r), uccl_last_error());
  OK(uccl_comm_shrink(comm, &newcomm, NULL));
  CHECK(newcomm != NULL, "shrink gave NULL");
  if (!newcomm) return;
  OK(uccl_comm_rank(newcomm, &nr));
  OK(uccl_comm_size(newcomm, &ns));
  CHECK(nr == me - 1 && ns == n - 1, "shrunk: rank %d of %d", nr, ns);
  for (i = 0; i < 1024; ++i) x[i] = (float)me;
  OK(uccl_all_reduce(x, x, 1024, uccl_float32, uccl_sum, newcomm, NULL));
  CHECK(x[1023] == n * (n - 1) / 2.0f, "all_reduce on the survivors = %g", x[1023]);
  OK(uccl_barrier(newcomm, NULL));
  OK(uccl_comm_destroy(newcomm));
  CHECK(uccl_comm_shrink(NULL, &newcomm, NULL) == UCCL_ERR_INVALID_ARGUMENT, "shrink(NULL)");
}

/* Rank SIZE-1 dies and rank 1 leaves (alive, it never calls): the others shrink excluding both. */
static void shrink_excluding(uccl_comm_t comm, int n) {
  float x[1024] = {0};
  uccl_comm_t newcomm = NULL;
  int nr = -1, ns = -1, i, out[2] = {1, n - 1}, self[1] = {me};
  OK(uccl_all_reduce(x, x, 1024, uccl_float32, uccl_sum, comm, NULL)); /* the first step */
  if (me == n - 1) raise(SIGKILL);
  if (me == 1) return;
  uccl_result_t r = uccl_all_reduce(x, x, 1024, uccl_float32, uccl_sum, comm, NULL);
  CHECK(r == UCCL_ERR_REMOTE, "after the death -> %s: %s", uccl_error_string(r), uccl_last_error());
  CHECK(uccl_comm_shrink_excluding(comm, self, 1, &newcomm, NULL) == UCCL_ERR_INVALID_ARGUMENT,
        "excluding this rank itself: %s", uccl_last_error());
  CHECK(uccl_comm_shrink_excluding(comm, NULL, 2, &newcomm, NULL) == UCCL_ERR_INVALID_ARGUMENT, "exclude NULL");
  OK(uccl_comm_shrink_excluding(comm, out, 2, &newcomm, NULL));
  CHECK(newcomm != NULL, "shrink_excluding gave NULL");
  if (!newcomm) return;
  OK(uccl_comm_rank(newcomm, &nr));
  OK(uccl_comm_size(newcomm, &ns));
  CHECK(nr == (me == 0 ? 0 : me - 1) && ns == n - 2, "shrunk: rank %d of %d", nr, ns);
  for (i = 0; i < 1024; ++i) x[i] = (float)me;
  OK(uccl_all_reduce(x, x, 1024, uccl_float32, uccl_sum, newcomm, NULL));
  CHECK(x[1023] == n * (n - 1) / 2.0f - 1 - (n - 1), "all_reduce on the others = %g", x[1023]);
  OK(uccl_barrier(newcomm, NULL));
  OK(uccl_comm_destroy(newcomm));
}

static int grow(int n, int port, const uccl_config_t* cfg) {
  uccl_comm_t comm = NULL, newcomm = NULL;
  int nr = -1, ns = -1, v = me + 1, sum = 0;
  if (me < n - 1) {
    OK(uccl_comm_init_store(&comm, n - 1, me, "127.0.0.1", port, cfg));
    if (!comm) return 1;
    OK(uccl_all_reduce(&v, &sum, 1, uccl_int32, uccl_sum, comm, NULL));
    CHECK(uccl_comm_grow(comm, n, NULL, &newcomm, cfg) == UCCL_ERR_INVALID_ARGUMENT, "grow with a NULL tag");
    OK(uccl_comm_grow(comm, n, "c-grow", &newcomm, cfg));
  } else {
    OK(uccl_comm_join("127.0.0.1", port, "c-grow", &newcomm, cfg));
  }
  if (!newcomm) return 1;
  OK(uccl_comm_rank(newcomm, &nr));
  OK(uccl_comm_size(newcomm, &ns));
  CHECK(nr == me && ns == n, "grown: rank %d of %d", nr, ns);
  OK(uccl_all_reduce(&v, &sum, 1, uccl_int32, uccl_sum, newcomm, NULL));
  CHECK(sum == n * (n + 1) / 2, "all_reduce after grow = %d", sum);
  OK(uccl_barrier(newcomm, NULL));
  OK(uccl_comm_destroy(newcomm));
  if (comm) OK(uccl_comm_destroy(comm));
  if (failures) return 1;
  printf("CAPI-OK %d\n", checks);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s collectives|errors|dead-peer|shrink|shrink-excluding|grow RANK SIZE PORT\n", argv[0]);
    return 2;
  }
  const char* scenario = argv[1];
  int n = atoi(argv[3]), port = atoi(argv[4]);
  me = atoi(argv[2]);
  uccl_config_t cfg = UCCL_CONFIG_INITIALIZER;
  cfg.timeout_s = 60;
  if (strcmp(scenario, "grow") == 0) return grow(n, port, &cfg);
  uccl_comm_t comm = NULL;
  OK(uccl_comm_init_store(&comm, n, me, "127.0.0.1", port, &cfg));
  if (!comm) return 1;
  if (strcmp(scenario, "collectives") == 0) collectives(comm, n);
  else if (strcmp(scenario, "errors") == 0) errors(comm, n);
  else if (strcmp(scenario, "dead-peer") == 0) dead_peer(comm, n);
  else if (strcmp(scenario, "shrink") == 0) shrink(comm, n);
  else if (strcmp(scenario, "shrink-excluding") == 0) shrink_excluding(comm, n);
  else CHECK(0, "unknown scenario %s", scenario);
  OK(uccl_comm_destroy(comm));
  if (failures) return 1;
  printf("CAPI-OK %d\n", checks);
  return 0;
}
