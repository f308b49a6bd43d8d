"""The member side's Redis: the data plane's commands as values and their two executors
(the native trio connection and redis-py's, cluster-aware), the lag reads, the storeId check
and the one retry loop. Never imports the shells (`rsc.member.shells`)."""
