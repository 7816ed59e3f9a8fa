// The launchers' job names and Slurm's store port (launcher_job.hpp): inline in header-
// only use, compiled once into collectives::compiled with
// COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "launcher_job.hpp"

namespace collectives::bootstrap {

std::optional<std::string> job_name_on_this_host(std::string_view origin) {
  using detail::launcher_variable;
  if (origin == "Slurm") {
    const auto job = launcher_variable("SLURM_JOB_ID");
    if (!job) return std::nullopt;
    return "slurm job " + *job + " step " + launcher_variable("SLURM_STEP_ID").value_or("-");
  }
  if (origin == "Open MPI") {
    auto job = launcher_variable("PMIX_NAMESPACE");
    if (!job) job = launcher_variable("OMPI_MCA_ess_base_jobid");
    if (!job) return std::nullopt;
    std::string name = "open mpi job " + *job;
    for (const char* uri : {"PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3", "PMIX_SERVER_URI21",
                            "PMIX_SERVER_URI2", "OMPI_MCA_orte_hnp_uri"})
      if (const auto value = launcher_variable(uri)) return name.append(" server ").append(*value);
    return name;
  }
  if (origin.starts_with("Hydra")) return detail::hydra_proxy_identity();
  return std::nullopt;
}

std::optional<std::uint16_t> slurm_store_port() {
  const auto job = detail::launcher_variable("SLURM_JOB_ID");
  if (!job) return std::nullopt;
  const auto job_id =
      settings::parse_whole_number("SLURM_JOB_ID", *job, 0, (1LL << 62), "the Slurm job id, a whole number");
  std::uint64_t step_id = 0;
  if (const auto step = detail::launcher_variable("SLURM_STEP_ID"))
    if (std::from_chars(step->data(), step->data() + step->size(), step_id).ec != std::errc{}) step_id = 0;
  return slurm_store_port(static_cast<std::uint64_t>(job_id), step_id);
}

std::optional<detail::process_identity> detail::read_process(long pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(file, stat)) return std::nullopt;
  const auto open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  process_identity p;
  p.name = stat.substr(open + 1, close - open - 1);
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  // After the name: state (3), ppid (4), ..., starttime (22).
  for (int number = 3; fields >> field && number <= 22; ++number) {
    if (number == 4) p.parent = std::atol(field.c_str());
    if (number == 22) p.started = field;
  }
  if (p.started.empty()) return std::nullopt;
  return p;
}

}  // namespace collectives::bootstrap
