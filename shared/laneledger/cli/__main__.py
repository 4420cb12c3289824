import sys

from laneledger.cli import main

sys.exit(main())
