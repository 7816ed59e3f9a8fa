// The definitions of paired.hpp (for the layer test).
#include "paired.hpp"
