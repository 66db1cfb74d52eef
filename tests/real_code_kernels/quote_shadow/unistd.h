// A shim for another platform, for `#include "unistd.h"` only: <unistd.h> must still be the system's.
#error "this unistd.h shim is not for this platform"
