module compat

go 1.26

require github.com/ngrok/ngrok-api-go/v7 v7.6.0
