// The main() of every C++ test executable (doctest), and a listener that counts failed checks
// so that a forked child rank can turn them into its exit code (test_util.h: child_exit_code).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <atomic>

#include "test_util.h"

namespace uccl_test {
namespace {

std::atomic<int> g_failed_checks{0};

struct FailureCounter : doctest::IReporter {
  explicit FailureCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData& ad) override {
    if (ad.m_failed) g_failed_checks.fetch_add(1);
  }
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

int failed_checks() { return g_failed_checks.load(); }

}  // namespace uccl_test

DOCTEST_REGISTER_LISTENER("uccl_failure_counter", 1, uccl_test::FailureCounter);
