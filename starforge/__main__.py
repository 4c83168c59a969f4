from starforge.cli.main import main

main()
