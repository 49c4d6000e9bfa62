module tunnel-service/tests/edge/go

go 1.25.7

require golang.ngrok.com/ngrok/v2 v2.4.0

require (
	github.com/jpillora/backoff v1.0.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	golang.ngrok.com/muxado/v2 v2.0.1 // indirect
	golang.org/x/net v0.50.0 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)
