// A circle (for the layer test): circle_a.hpp includes circle_b.hpp, which includes it.
#pragma once

#include "circle_b.hpp"
