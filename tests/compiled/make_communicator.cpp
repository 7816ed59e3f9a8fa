// The one translation unit of this program that creates a communicator; with
// collectives::compiled it instantiates none of the start-up itself.
#include "make_communicator.hpp"

collectives::communicator<collectives::automatic_transport> make_communicator() {
  return collectives::communicator<collectives::automatic_transport>::from_env();
}
