module tunnel/bench/tls_client

go 1.21
