// collectives::compiled: the library's compiled part, built once (see
// <collectives/impl/src.hpp>); the target defines COLLECTIVES_SEPARATE_COMPILATION.
#include <collectives/impl/src.hpp>
