// expect: not a variable in the table of collectives/settings.hpp
// A reader given a name the table does not have (here misspelt) does not compile.
#include <collectives/settings.hpp>

int main() { return collectives::settings::seconds("COLLECTIVES_TIMEOUTS").has_value() ? 1 : 0; }
