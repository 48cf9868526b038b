"""ClusterFuzzLite entry point: mmharness's case parser (``mmharness fuzz case-parser``)."""

import sys

from mmharness.fuzz import case_parser

if __name__ == "__main__":
    case_parser.main(sys.argv)
