// The module's functions are static inline in include/CSwitchboardZlib.h; SwiftPM needs one C file.
#include "CSwitchboardZlib.h"
