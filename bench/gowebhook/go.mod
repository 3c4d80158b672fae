module workload-resizer.io/bench/gowebhook

go 1.23
