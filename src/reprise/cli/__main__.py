from reprise.cli import main

main()
