// Who may talk to this job: the job key, and the challenge-response built on it.
//
// Why: without a key, a job's connections are guarded by a per-job secret that rank 0
// publishes in the store, and the store answers anyone who reaches its port; that keeps out
// accidents (a port scanner, a stray client), not people. A job key is given out of band to
// every process (UCCL_JOB_KEY, or UCCL_JOB_KEY_FILE naming a file that holds it) and never
// travels: store clients and data connections prove that they know it by an HMAC-SHA256 over
// fresh nonces from both sides (each side's nonce is random per connection, so a recorded
// exchange cannot be replayed), and both sides check the other's proof in constant time.
//
// No launcher shares anything secret that uccl could derive a key from: torchrun's run id,
// Slurm's job id and MPI's job ids are visible to anyone on the machines (and guessable), so a
// key derived from them would only pretend to protect. The key comes from the environment or a
// file; without one, the keyless behaviour stays (auth_mode() says which mode is on).
//
// Also here, for the floors above: HMAC-SHA256, random bytes and a constant-time compare
// (OpenSSL's libcrypto), and the key material for a TLS link (link_key()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "uccl/status.h"
#include "base/config.h"

namespace uccl {

extern const SecretSetting kJobKey;    // UCCL_JOB_KEY (never printed)
extern const TextSetting kJobKeyFile;  // UCCL_JOB_KEY_FILE

constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
constexpr size_t kMinJobKeyBytes = 16;

// The job key of this process, or "" in the keyless mode. Read once (the file too). An error
// (both variables set, unreadable file, a key shorter than kMinJobKeyBytes) is InvalidArgument
// naming the variable; store and communicator creation return it.
Result<std::string> job_key();
// "job key (UCCL_JOB_KEY): ..." or "no job key: ..." (python -m uccl.info).
std::string auth_mode();

// HMAC-SHA256(key, label || data), 32 bytes. The label keeps the proofs of different steps
// (store server, store client, hello, ack, TLS) from standing in for each other.
std::string hmac_sha256(const std::string& key, const std::string& label, const std::string& data);
// Fills buf from the OS's random source (OpenSSL's RAND_bytes).
void random_bytes(void* buf, size_t n);
// Constant-time equality of two n-byte buffers.
bool equal_ct(const void* a, const void* b, size_t n);

}  // namespace uccl
