#ifndef C_SWITCHBOARD_ZLIB_H
#define C_SWITCHBOARD_ZLIB_H

#include <zlib.h>

/// `inflateInit` and `deflateInit` are macros in zlib.h, which Swift cannot call; these wrap them.
static inline int CSwitchboardZlib_inflateInit(z_streamp stream) {
    return inflateInit(stream);
}

static inline int CSwitchboardZlib_deflateInit(z_streamp stream, int level) {
    return deflateInit(stream, level);
}

#endif
