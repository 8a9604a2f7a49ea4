"""Tools for developing servebench and demonstrating it, not part of a campaign: the testbed (network
namespaces with their own sshd and Slurm standing for cluster hosts on one machine) and the nightly test lane.
Installed with the package because `servebench testbed` and the tests-nightly deployment use them."""
