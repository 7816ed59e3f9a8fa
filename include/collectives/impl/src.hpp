// The compiled part of the library, for separate compilation as Boost.Asio offers it:
// the start-up and the transports' engines. Include this in exactly one source file of
// a program whose every translation unit defines COLLECTIVES_SEPARATE_COMPILATION (the
// collectives::compiled target is that file, built once, with the definition passed on
// to whatever links it).
#pragma once

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#error "<collectives/impl/src.hpp> is for separate compilation: define COLLECTIVES_SEPARATE_COMPILATION in every translation unit"
#endif

#include "../transport/automatic.ipp"
#include "../transport/shm.ipp"
#include "../transport/shm/engine.ipp"
#include "../transport/tcp.ipp"
#include "../transport/tcp/engine.ipp"
