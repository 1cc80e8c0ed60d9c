// Command payment-service is an example worker service: it embeds a StackSaga
// worker that serves the place-order saga's payment step. Run Kafka first
// (docker compose up -d, or make services-up), then:
//
//	KAFKA_BROKERS=127.0.0.1:9092 go run ./examples/payment-service
package main

import "github.com/stacksaga-go/stacksaga/examples/placeorder"

func main() { placeorder.WorkerMain(placeorder.PaymentService, placeorder.RegisterPayment) }
