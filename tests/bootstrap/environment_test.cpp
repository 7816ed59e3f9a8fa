// detect_launch: each launcher's variables, which wins when several are set, and the
// message for each malformed or missing value.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <map>
#include <ostream>  // lets doctest print an error_code
#include <string>
#include <utility>

#include <collectives/bootstrap/environment.hpp>

using collectives::errc;
using collectives::bootstrap::detect_launch;
using collectives::bootstrap::launch_info;

namespace {

// Clears every variable detect_launch reads, and puts them all back afterwards.
class clean_environment {
 public:
  clean_environment() {
    for (const char* name : names) {
      if (const char* value = std::getenv(name)) saved_[name] = value;
      ::unsetenv(name);
    }
  }
  ~clean_environment() {
    for (const char* name : names) ::unsetenv(name);
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  clean_environment(const clean_environment&) = delete;
  clean_environment& operator=(const clean_environment&) = delete;

  void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }
  void set(std::initializer_list<std::pair<const char*, const char*>> assignments) {
    for (const auto& [name, value] : assignments) set(name, value);
  }
  void torchrun(const char* rank = "1", const char* size = "4") {
    set({{"RANK", rank}, {"WORLD_SIZE", size}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
  }

 private:
  static constexpr const char* names[] = {"RANK",
                                          "WORLD_SIZE",
                                          "LOCAL_RANK",
                                          "LOCAL_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_RANK",
                                          "OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "OMPI_COMM_WORLD_LOCAL_SIZE",
                                          "SLURM_PROCID",
                                          "SLURM_NTASKS",
                                          "SLURM_LOCALID",
                                          "SLURM_NTASKS_PER_NODE",
                                          "SLURM_STEP_TASKS_PER_NODE",
                                          "SLURM_NODEID",
                                          "MASTER_ADDR",
                                          "MASTER_PORT",
                                          "COLLECTIVES_STORE_DIR",
                                          // read to derive the rendezvous, or as signs of a launcher
                                          "PMI_RANK",
                                          "PMI_SIZE",
                                          "MPI_LOCALRANKID",
                                          "MPI_LOCALNRANKS",
                                          "PMI_FD",
                                          "PMI_PORT",
                                          "PMI_ID",
                                          "PMIX_RANK",
                                          "PMIX_NAMESPACE",
                                          "PMIX_SERVER_URI41",
                                          "PMIX_SERVER_URI4",
                                          "PMIX_SERVER_URI3",
                                          "PMIX_SERVER_URI21",
                                          "PMIX_SERVER_URI2",
                                          "OMPI_MCA_orte_hnp_uri",
                                          "OMPI_MCA_ess_base_jobid",
                                          "OMPI_UNIVERSE_SIZE",
                                          "SLURM_JOB_ID",
                                          "SLURM_STEP_ID",
                                          "SLURM_STEP_NODELIST",
                                          "SLURM_JOB_NODELIST",
                                          "SLURM_NODELIST",
                                          "TORCHELASTIC_RUN_ID",
                                          "TORCHELASTIC_USE_AGENT_STORE",
                                          "TORCHELASTIC_RESTART_COUNT",
                                          "GROUP_RANK"};
  std::map<std::string, std::string> saved_;
};

// detect_launch() must fail with errc::invalid_config; returns the message.
std::string config_error() {
  try {
    detect_launch();
  } catch (const collectives::error& e) {
    CHECK(e.code() == errc::invalid_config);
    return e.what();
  }
  FAIL("detect_launch() accepted the environment");
  return {};
}

}  // namespace

TEST_CASE("torchrun-style variables") {
  clean_environment env;
  env.torchrun("2", "8");
  env.set({{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "4"}});
  const launch_info info = detect_launch();
  CHECK(info.origin == "torchrun-style environment");
  CHECK(info.rank == 2);
  CHECK(info.size == 8);
  CHECK(info.local_rank == 0);
  CHECK(info.local_size == 4);
  CHECK(info.master_addr == "127.0.0.1");
  CHECK(info.master_port == 29500);
}

TEST_CASE("torchrun itself, and its agent store with a key prefix per run and restart") {
  clean_environment env;
  env.torchrun("1", "4");
  env.set({{"TORCHELASTIC_RUN_ID", "job-7"}, {"TORCHELASTIC_RESTART_COUNT", "2"}});
  auto info = detect_launch();
  CHECK(info.origin == "torchrun");
  CHECK(info.launcher_store_prefix.empty());  // another rendezvous: rank 0 serves the store, as before
  env.set("TORCHELASTIC_USE_AGENT_STORE", "False");
  CHECK(detect_launch().launcher_store_prefix.empty());
  env.set("TORCHELASTIC_USE_AGENT_STORE", "True");
  info = detect_launch();
  CHECK(info.launcher_store_prefix == "collectives/torchrun/job-7/2/");
  CHECK(info.master_port == 29500);
  env.set("TORCHELASTIC_RESTART_COUNT", "3");
  CHECK(detect_launch().launcher_store_prefix == "collectives/torchrun/job-7/3/");
  env.set("TORCHELASTIC_RESTART_COUNT", "x");
  CHECK(config_error().starts_with("TORCHELASTIC_RESTART_COUNT=x is not a whole number"));
  ::unsetenv("TORCHELASTIC_RESTART_COUNT");
  CHECK(config_error().starts_with("TORCHELASTIC_USE_AGENT_STORE=True is set but TORCHELASTIC_RESTART_COUNT is not"));
  ::unsetenv("TORCHELASTIC_RUN_ID");  // without torchrun's mark, its other variables are not read
  info = detect_launch();
  CHECK(info.origin == "torchrun-style environment");
  CHECK(info.launcher_store_prefix.empty());
}

TEST_CASE("without local variables a process is taken to be alone on its host") {
  clean_environment env;
  env.torchrun("3", "4");
  auto info = detect_launch();
  CHECK(info.local_rank == 0);
  CHECK(info.local_size == 1);
  env.set("LOCAL_RANK", "2");
  info = detect_launch();
  CHECK(info.local_rank == 2);
  CHECK(info.local_size == 3);  // the smallest size that fits the local rank
}

TEST_CASE("Open MPI variables") {
  clean_environment env;
  env.set({{"OMPI_COMM_WORLD_RANK", "5"},
           {"OMPI_COMM_WORLD_SIZE", "6"},
           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
           {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
           {"MASTER_ADDR", "node0"},
           {"MASTER_PORT", "1234"}});
  const auto info = detect_launch();
  CHECK(info.origin == "Open MPI");
  CHECK(info.rank == 5);
  CHECK(info.size == 6);
  CHECK(info.local_rank == 1);
  CHECK(info.local_size == 3);
  CHECK(info.master_addr == "node0");
  CHECK(info.master_port == 1234);
}

TEST_CASE("Slurm variables, and the local size from each place Slurm may put it") {
  clean_environment env;
  env.set({{"SLURM_PROCID", "4"},
           {"SLURM_NTASKS", "7"},
           {"SLURM_LOCALID", "1"},
           {"MASTER_ADDR", "::1"},
           {"MASTER_PORT", "65535"}});
  auto info = detect_launch();
  CHECK(info.origin == "Slurm");
  CHECK(info.rank == 4);
  CHECK(info.size == 7);
  CHECK(info.local_rank == 1);
  CHECK(info.local_size == 2);  // nothing says: the smallest size that fits
  CHECK(info.master_port == 65535);

  env.set({{"SLURM_STEP_TASKS_PER_NODE", "3(x2),1"}, {"SLURM_NODEID", "1"}});
  CHECK(detect_launch().local_size == 3);
  env.set("SLURM_NODEID", "2");
  CHECK(detect_launch().local_size == 2);  // 1 task on node 2, but local rank 1 needs at least 2
  env.set("SLURM_NTASKS_PER_NODE", "4");   // a plain number is taken first
  CHECK(detect_launch().local_size == 4);
  env.set("SLURM_NTASKS_PER_NODE", "2(x3)");  // not a plain number: back to the layout
  env.set("SLURM_NODEID", "0");
  CHECK(detect_launch().local_size == 3);
}

TEST_CASE("torchrun-style variables win over Open MPI's, which win over Slurm's") {
  clean_environment env;
  env.set({{"SLURM_PROCID", "0"},
           {"SLURM_NTASKS", "2"},
           {"OMPI_COMM_WORLD_RANK", "1"},
           {"OMPI_COMM_WORLD_SIZE", "3"},
           {"MASTER_ADDR", "h"},
           {"MASTER_PORT", "1"}});
  CHECK(detect_launch().origin == "Open MPI");
  env.set({{"RANK", "2"}, {"WORLD_SIZE", "4"}});
  const auto info = detect_launch();
  CHECK(info.origin == "torchrun-style environment");
  CHECK(info.rank == 2);
}

TEST_CASE("a file store makes MASTER_ADDR and MASTER_PORT optional") {
  clean_environment env;
  env.set({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  CHECK(config_error().find("MASTER_ADDR is not set") != std::string::npos);
  env.set("MASTER_ADDR", "host");
  CHECK(config_error().find("MASTER_PORT is not set") != std::string::npos);
  env.set("COLLECTIVES_STORE_DIR", "/shared/dir");
  const auto info = detect_launch();
  CHECK(info.master_addr == "host");
  CHECK(info.master_port == 0);
}

TEST_CASE("each malformed value is named with what was expected") {
  const std::pair<std::pair<const char*, const char*>, const char*> cases[] = {
      {{"RANK", "abc"}, "RANK=abc is not a whole number (expected the rank of this process, from 0)"},
      {{"RANK", "-1"}, "RANK=-1 is out of range"},
      {{"RANK", "+1"}, "RANK=+1 is not a whole number"},
      {{"RANK", " 1"}, "RANK=' 1' is not a whole number"},
      {{"RANK", "1x"}, "RANK=1x is not a whole number"},
      {{"RANK", "4"}, "RANK=4 is not below WORLD_SIZE=4"},
      {{"RANK", "99999999999999999999"}, "RANK=99999999999999999999 is out of range"},
      {{"WORLD_SIZE", "0"}, "WORLD_SIZE=0 is out of range (expected the number of processes in the job, at least 1)"},
      {{"WORLD_SIZE", "four"}, "WORLD_SIZE=four is not a whole number"},
      {{"LOCAL_RANK", "x"}, "LOCAL_RANK=x is not a whole number"},
      {{"LOCAL_WORLD_SIZE", "2"}, "LOCAL_WORLD_SIZE is set but LOCAL_RANK is not"},
      {{"MASTER_PORT", "0"}, "MASTER_PORT=0 is out of range (expected a TCP port, 1 to 65535)"},
      {{"MASTER_PORT", "65536"}, "MASTER_PORT=65536 is out of range"},
      {{"MASTER_PORT", "http"}, "MASTER_PORT=http is not a whole number"},
  };
  for (const auto& c : cases) {
    const char* name = c.first.first;
    const char* value = c.first.second;
    CAPTURE(name);
    CAPTURE(value);
    clean_environment env;
    env.torchrun("1", "4");
    env.set(name, value);
    const auto message = config_error();
    CHECK_MESSAGE(message.find(c.second) != std::string::npos, message);
  }
  clean_environment env;
  env.torchrun("1", "4");
  env.set({{"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}});
  CHECK(config_error().starts_with("LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"));
  env.set({{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "5"}});
  CHECK(config_error().starts_with("LOCAL_WORLD_SIZE=5 is larger than WORLD_SIZE=4"));
  env.set({{"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"SLURM_PROCID", "x"}});  // other launchers' values are not read
  ::unsetenv("LOCAL_WORLD_SIZE");
  CHECK(detect_launch().local_size == 1);
}

TEST_CASE("a half-set launcher and an empty environment are explained") {
  clean_environment env;
  env.set({{"OMPI_COMM_WORLD_RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
  CHECK(
      config_error().starts_with("OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not; set both, or neither"));
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  env.set("SLURM_NTASKS", "2");
  CHECK(config_error().find("SLURM_NTASKS is set but SLURM_PROCID is not") != std::string::npos);
  ::unsetenv("SLURM_NTASKS");
  const auto message = config_error();
  for (const char* way : {"collectives-run", "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT", "mpirun", "srun"})
    CHECK_MESSAGE(message.find(way) != std::string::npos, way);
}

TEST_CASE("Hydra's variables (mpiexec of MPICH and Intel MPI)") {
  clean_environment env;
  env.set({{"PMI_RANK", "2"},
           {"PMI_SIZE", "4"},
           {"MPI_LOCALRANKID", "0"},
           {"MPI_LOCALNRANKS", "2"},
           {"MASTER_ADDR", "node0"},
           {"MASTER_PORT", "1234"}});
  const auto info = detect_launch();
  CHECK(info.origin == "Hydra (MPICH, Intel MPI)");
  CHECK(info.rank == 2);
  CHECK(info.size == 4);
  CHECK(info.local_rank == 0);
  CHECK(info.local_size == 2);
  CHECK(info.master_addr == "node0");
  CHECK(info.job_on_this_host.empty());  // explicit addresses win
  env.set("PMI_RANK", "4");
  CHECK(config_error().starts_with("PMI_RANK=4 is not below PMI_SIZE=4"));
  ::unsetenv("PMI_SIZE");
  CHECK(config_error().starts_with("PMI_RANK is set but PMI_SIZE is not"));
}

TEST_CASE("which launcher's variables win: torchrun-style, Open MPI, Hydra, Slurm") {
  clean_environment env;
  env.set({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}});
  env.set({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}});
  CHECK(detect_launch().origin == "Slurm");  // srun --mpi=pmi2: PMI_RANK without Hydra's local ranks
  env.set({{"PMI_RANK", "1"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "1"}});
  CHECK(detect_launch().origin == "Hydra (MPICH, Intel MPI)");  // mpiexec inside a Slurm job
  CHECK(detect_launch().rank == 1);
  env.set({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}});
  CHECK(detect_launch().origin == "Open MPI");
}

TEST_CASE("PMIX_RANK alone is explained, not taken for a job of one") {
  clean_environment env;
  env.set({{"PMIX_RANK", "0"}, {"PMIX_NAMESPACE", "prterun-host-1234@1"}});
  const auto message = config_error();
  CHECK_MESSAGE(message.starts_with("PMIX_RANK is set, but no variable says how many processes the job has"), message);
  CHECK(collectives::bootstrap::rank_variables_set());
}

TEST_CASE("one host without MASTER_ADDR and MASTER_PORT: the ranks meet under the launcher's name for the job") {
  clean_environment env;
  env.set({{"OMPI_COMM_WORLD_RANK", "1"},
           {"OMPI_COMM_WORLD_SIZE", "3"},
           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
           {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
           {"PMIX_NAMESPACE", "1516699649"},
           {"PMIX_SERVER_URI2", "1516699648.0;tcp4://127.0.0.1:60921"}});
  auto info = detect_launch();
  CHECK(info.job_on_this_host == "open mpi job 1516699649 server 1516699648.0;tcp4://127.0.0.1:60921");
  CHECK(info.master_addr.empty());
  env.set("COLLECTIVES_STORE_DIR", "/shared");  // a store directory wins
  CHECK(detect_launch().job_on_this_host.empty());
  ::unsetenv("COLLECTIVES_STORE_DIR");
  env.set({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "5"}});  // and so do explicit addresses
  info = detect_launch();
  CHECK(info.job_on_this_host.empty());
  CHECK(info.master_port == 5);
  ::unsetenv("MASTER_PORT");  // half of them: nothing is derived under Open MPI
  CHECK(config_error().starts_with("MASTER_PORT is not set: a job started by Open MPI"));
  ::unsetenv("MASTER_ADDR");

  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");  // two hosts: nowhere to meet without an address
  const auto message = config_error();
  CHECK_MESSAGE(message.starts_with("MASTER_ADDR is not set: a job started by Open MPI puts the job's ranks on more "
                                    "than one host (2 of 3 here) and says nowhere where rank 0 runs, so it needs "
                                    "MASTER_ADDR and MASTER_PORT"),
                message);
  CHECK(message.find('\n') == std::string::npos);

  clean_environment hydra;
  hydra.set({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "2"}});
  // This test is not under hydra_pmi_proxy: no name for the job, and the error says what to set.
  CHECK(config_error().starts_with("MASTER_ADDR is not set: a job started by Hydra (MPICH, Intel MPI) names no job that "
                                   "its ranks could meet under on this host, so it needs MASTER_ADDR and MASTER_PORT"));
}

TEST_CASE("Slurm without MASTER_ADDR and MASTER_PORT: one node, or the step's first node and a port from the job id") {
  clean_environment env;
  env.set({{"SLURM_PROCID", "3"},
           {"SLURM_NTASKS", "4"},
           {"SLURM_LOCALID", "1"},
           {"SLURM_NODEID", "0"},
           {"SLURM_STEP_TASKS_PER_NODE", "4"},
           {"SLURM_JOB_ID", "81234"},
           {"SLURM_STEP_ID", "2"}});
  // Not under srun (a batch script's own shell): no step, nothing derived.
  CHECK(config_error().starts_with("SLURM_PROCID is set but SLURM_STEP_NODELIST is not: this process is not a task of "
                                   "an srun step"));
  env.set("SLURM_STEP_NODELIST", "node07");
  CHECK(detect_launch().job_on_this_host == "slurm job 81234 step 2");

  env.set("SLURM_STEP_TASKS_PER_NODE", "2(x2)");  // two nodes
  env.set("SLURM_JOB_ID", "");  // no job id: no port
  CHECK(config_error().starts_with("MASTER_ADDR is not set: a job started by Slurm puts the job's ranks on more than "
                                   "one host (2 of 4 here) and gives no node list (SLURM_STEP_NODELIST) or no job id"));
  env.set("SLURM_JOB_ID", "81234");
  env.set({{"SLURM_JOB_NODELIST", "other[1-4]"}, {"SLURM_STEP_NODELIST", "node[07-09,12],gpu1"}});
  auto info = detect_launch();
  CHECK(info.job_on_this_host.empty());
  CHECK(info.master_addr == "node07");  // the step's list before the job's
  CHECK(info.master_port == 20000 + 234 * 10 + 2);
  CHECK(info.derived_port_of_job == "slurm job 81234 step 2");  // keeps jobs on one port apart
  env.set("MASTER_PORT", "29500");  // what is given wins, the rest is derived
  info = detect_launch();
  CHECK(info.master_addr == "node07");
  CHECK(info.master_port == 29500);
  env.set("MASTER_ADDR", "10.0.0.1");
  CHECK(detect_launch().master_addr == "10.0.0.1");
  ::unsetenv("MASTER_ADDR");
  ::unsetenv("MASTER_PORT");

  env.set("SLURM_STEP_NODELIST", "node[07-");
  CHECK(config_error().starts_with("SLURM_STEP_NODELIST=node[07- is not a Slurm host list"));
  env.set("SLURM_STEP_NODELIST", "node1");
  env.set("SLURM_JOB_ID", "12x");
  CHECK(config_error().starts_with("SLURM_JOB_ID=12x is not a whole number"));
}

TEST_CASE("the Slurm store port: jobs less than 1000 apart and the first ten steps of a job never share one") {
  using collectives::bootstrap::slurm_store_port;
  CHECK(slurm_store_port(0, 0) == 20000);
  CHECK(slurm_store_port(999, 9) == 29999);
  CHECK(slurm_store_port(81234, 2) == 22342);
  CHECK(slurm_store_port(1234, 12) == slurm_store_port(1234, 2));
  for (std::uint64_t job = 5000; job < 6000; ++job)
    CHECK(slurm_store_port(job, 0) != slurm_store_port(job + 1, 0));
}

TEST_CASE("the signs of a launcher that gave no rank") {
  clean_environment env;
  using collectives::bootstrap::launcher_without_ranks;
  using collectives::bootstrap::rank_variables_set;
  CHECK(!rank_variables_set());
  CHECK(!launcher_without_ranks());
  env.set("SLURM_JOB_ID", "77");  // a shell in a Slurm allocation
  CHECK(launcher_without_ranks() == "SLURM_JOB_ID=77");
  env.set("PMI_FD", "6");
  CHECK(launcher_without_ranks() == "PMI_FD=6");
  env.set("PMI_SIZE", "2");  // half a pair counts as a rank: detect_launch names the other half
  CHECK(rank_variables_set());
  CHECK(!launcher_without_ranks());
}
