// A header and its definitions, which include each other (for the layer test: not a circle).
#pragma once

#include "paired.ipp"
