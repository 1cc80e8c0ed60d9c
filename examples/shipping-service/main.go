// Command shipping-service is an example worker service: it embeds a StackSaga
// worker that serves the place-order saga's shipping step. Run Kafka first
// (docker compose up -d, or make services-up), then:
//
//	STACKSAGA_KAFKA_BROKERS=127.0.0.1:9092 go run ./examples/shipping-service
//
// or with the services' YAML applied whole (worker.WithConfig: region,
// cluster, brokers, group; its write protection as the guard):
//
//	go run ./examples/shipping-service --config examples/stacksaga.yaml
package main

import "github.com/stacksaga-go/stacksaga/examples/placeorder"

func main() { placeorder.WorkerMain(placeorder.ShippingService, placeorder.RegisterShipping) }
