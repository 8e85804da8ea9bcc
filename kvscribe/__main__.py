from kvscribe.cli import main

main()
