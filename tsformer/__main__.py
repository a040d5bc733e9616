from tsformer.cli import main

main()
