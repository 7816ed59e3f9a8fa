// The compiled part of the library, for separate compilation as Boost.Asio offers it:
// the start-up, the transports' engines, the executor's core over each built-in
// transport, and the functions of the other headers that are not templates (each
// header's .ipp: the plans, the settings, the log, the trace). Include this in exactly one source file of a program whose every
// translation unit defines COLLECTIVES_SEPARATE_COMPILATION (the collectives::compiled
// target is that file, built once, with the definition passed on to whatever links it).
#pragma once

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#error "<collectives/impl/src.hpp> is for separate compilation: define COLLECTIVES_SEPARATE_COMPILATION in every translation unit"
#endif

#include "../transport/automatic/transport.ipp"
#include "../transport/shm/transport.ipp"
#include "../transport/shm/engine.ipp"
#include "../transport/tcp/transport.ipp"
#include "../transport/tcp/engine.ipp"
#include "../algorithm/direct.ipp"
#include "../algorithm/halving_doubling.ipp"
#include "../algorithm/ring.ipp"
#include "../algorithm/tree.ipp"
#include "../bootstrap/host_identity.ipp"
#include "../bootstrap/hostlist.ipp"
#include "../bootstrap/launcher_job.ipp"
#include "../detail/call_check.ipp"
#include "../detail/cost_file.ipp"
#include "../detail/exchange.ipp"
#include "../detail/hosts.ipp"
#include "../detail/measured_costs.ipp"
#include "../log.ipp"
#include "../settings.ipp"
#include "../trace.ipp"
#include "../runtime/progress_thread.ipp"
#include "../runtime/compact_plan.ipp"
#include "../detail/call.hpp"
#include "../run_ranks.hpp"

// The executor's core and the communicator over each built-in transport (the headers
// declare them extern).
namespace collectives {
template class executor_core<inproc>;
template class executor_core<shm>;
template class executor_core<tcp>;
template class executor_core<automatic_transport>;
template class communicator<inproc>;
template class communicator<shm>;
template class communicator<tcp>;
template class communicator<automatic_transport>;

// Their exchanges, and the default algorithm's plans (detail/call.hpp declares them).
namespace detail {
call_services services_of(communicator<inproc>& comm) { return services_of<inproc>(comm); }
call_services services_of(communicator<shm>& comm) { return services_of<shm>(comm); }
call_services services_of(communicator<tcp>& comm) { return services_of<tcp>(comm); }
call_services services_of(communicator<automatic_transport>& comm) { return services_of<automatic_transport>(comm); }

template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::broadcast, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::reduce, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::all_reduce, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::gather, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::gatherv, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::scatter, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::scatterv, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::all_gather, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::all_gatherv, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::reduce_scatter, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::reduce_scatterv, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::all_to_all, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::all_to_allv, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::barrier, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
}  // namespace detail
}  // namespace collectives
