// expect: the variable is of another kind in the table of collectives/settings.hpp
// COLLECTIVES_TIMEOUT is a number of seconds, so it cannot be read as a flag.
#include <collectives/settings.hpp>

int main() { return collectives::settings::flag("COLLECTIVES_TIMEOUT").value_or(false) ? 1 : 0; }
