import sys

from e2e.bench.burst import main

sys.exit(main())
