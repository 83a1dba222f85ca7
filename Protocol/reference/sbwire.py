#!/usr/bin/env python3
"""Reference codec for the Switchboard wire protocol v1 (Protocol/SPEC.md): the command line.

The codec itself lives in the Python client package, clients/python/src/switchboard/wire.py (standard library only,
driven by the package's copy of Protocol/schema.json, which Tools/codegen/generate.py keeps identical). This file
imports that module from this repository and stands in for it, so `import sbwire` keeps working for the scripts
next to it (make_vectors.py, make_examples.py, sbdump.py).

    python3 sbwire.py --selftest            check every vector in Protocol/vectors both ways
    python3 sbwire.py --decode HEX [c2s|s2c] print the canonical JSON rendering of one frame
    python3 sbwire.py --encode JSON          print the frame of a canonical JSON rendering as hex
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python", "src"))

from switchboard import wire  # noqa: E402

wire.VECTORS = os.path.join(HERE, "..", "vectors")

if __name__ == "__main__":
    sys.exit(wire.main(sys.argv))

sys.modules[__name__] = wire                                    # `import sbwire` is the package's module
