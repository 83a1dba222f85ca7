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

/// `deflateInit2` with a zlib (RFC 1950) wrapper: `windowBits` 9-15, `memLevel` 1-9.
static inline int CSwitchboardZlib_deflateInit2(z_streamp stream, int level, int windowBits, int memLevel) {
    return deflateInit2(stream, level, Z_DEFLATED, windowBits, memLevel, Z_DEFAULT_STRATEGY);
}

#endif
