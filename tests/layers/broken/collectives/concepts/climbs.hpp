// For check_layers' own test: vocabulary that includes a transport, which it must refuse.
#pragma once

#include "../transport/inproc.hpp"
