// Command inventory-service is an example worker service: it embeds a StackSaga
// worker that serves the place-order saga's inventory step. Run Kafka first
// (docker compose up -d, or make services-up), then:
//
//	KAFKA_BROKERS=127.0.0.1:9092 go run ./examples/inventory-service
package main

import (
	"flag"
	"log/slog"
	"os"

	"github.com/stacksaga-go/stacksaga/examples/placeorder"
)

func main() {
	kafka := flag.String("kafka", "", "Kafka brokers, comma-separated (default $KAFKA_BROKERS or 127.0.0.1:9092)")
	flag.Parse()
	if err := placeorder.RunWorker(placeorder.InventoryService, placeorder.Brokers(*kafka), placeorder.RegisterInventory); err != nil {
		slog.Error("inventory-service stopped", "err", err)
		os.Exit(1)
	}
}
