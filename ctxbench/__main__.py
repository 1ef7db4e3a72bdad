from ctxbench.cli import main

main()
