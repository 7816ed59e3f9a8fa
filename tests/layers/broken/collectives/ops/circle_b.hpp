// A circle (for the layer test): see circle_a.hpp.
#pragma once

#include "circle_a.hpp"
