#include "bootstrap/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include "base/log.h"

namespace uccl {

const SecretSetting kJobKey("security", "UCCL_JOB_KEY", "",
                            "job key (at least 16 bytes) given to every process out of band: store clients and data "
                            "connections authenticate with it; empty = keyless (the store's job secret)",
                            any_text());
const TextSetting kJobKeyFile("security", "UCCL_JOB_KEY_FILE", "",
                              "file holding the job key (one trailing newline is ignored); instead of UCCL_JOB_KEY",
                              any_text());

namespace {

struct KeyState {
  std::once_flag once;
  Status error;
  std::string key;
  std::string source;
};

KeyState& key_state() {
  static KeyState s;
  std::call_once(s.once, [] {
    const std::string& text = kJobKey.get();
    const std::string& path = kJobKeyFile.get();
    if (!text.empty() && !path.empty()) {
      s.error = InvalidArgument("UCCL_JOB_KEY and UCCL_JOB_KEY_FILE are both set: set one of them");
      return;
    }
    if (!path.empty()) {
      std::ifstream f(path, std::ios::binary);
      if (!f) {
        s.error = InvalidArgument("UCCL_JOB_KEY_FILE=" + path + ": cannot read the file");
        return;
      }
      std::stringstream ss;
      ss << f.rdbuf();
      s.key = ss.str();
      if (!s.key.empty() && s.key.back() == '\n') s.key.pop_back();
      if (!s.key.empty() && s.key.back() == '\r') s.key.pop_back();
      s.source = "UCCL_JOB_KEY_FILE=" + path;
      struct stat st {};
      if (stat(path.c_str(), &st) == 0 && (st.st_mode & 077))
        UCCL_WARN("UCCL_JOB_KEY_FILE=%s is readable by group or others (chmod 600 it)", path.c_str());
    } else if (!text.empty()) {
      s.key = text;
      s.source = "UCCL_JOB_KEY";
    }
    if (!s.key.empty() && s.key.size() < kMinJobKeyBytes) {
      s.error = InvalidArgument(s.source + ": the job key has " + std::to_string(s.key.size()) +
                                " bytes, at least " + std::to_string(kMinJobKeyBytes) + " are needed");
      s.key.clear();
    }
  });
  return s;
}

}  // namespace

Result<std::string> job_key() {
  KeyState& s = key_state();
  if (!s.error.ok()) return s.error;
  return s.key;
}

std::string auth_mode() {
  KeyState& s = key_state();
  if (!s.error.ok()) return "refused: " + s.error.message();
  if (!s.key.empty())
    return "job key (" + s.source + "): store clients and data connections prove the key by challenge-response";
  return "no job key: connections carry the per-job secret that rank 0 publishes in the store (readable by "
         "anyone who can reach the store)";
}

std::string hmac_sha256(const std::string& key, const std::string& label, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  const std::string msg = label + data;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

void random_bytes(void* buf, size_t n) {
  if (RAND_bytes(static_cast<unsigned char*>(buf), static_cast<int>(n)) == 1) return;
  // OpenSSL's generator failed (no entropy source): the kernel's, through random_device.
  std::random_device rd;
  auto* p = static_cast<unsigned char*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(rd());
}

bool equal_ct(const void* a, const void* b, size_t n) { return CRYPTO_memcmp(a, b, n) == 0; }

}  // namespace uccl
