// Package checkout is the saga of the README's quickstart: an order-service
// orchestrator (../order-service) charges a payment through a
// payment-service worker (../payment-service), two separate processes
// sharing Kafka, Cassandra and examples/stacksaga.yaml.
package checkout

import (
	"errors"

	"github.com/stacksaga-go/stacksaga/orchestrator"
)

// Names of the saga domain, its services and its endpoint.
const (
	Domain         = "checkout"
	OrderService   = "order-service"
	PaymentService = "payment-service"
	Charge         = "charge"
)

// Order is the saga's domain entity (msgpack on the wire).
type Order struct {
	OrderID   string `msgpack:"order_id"`
	Amount    int64  `msgpack:"amount"` // in cents
	PaymentID string `msgpack:"payment_id,omitempty"`
	Refunded  bool   `msgpack:"refunded,omitempty"`
}

// ErrDeclined is the business failure of the charge step: an amount over
// the limit is declined, so the saga compensates.
var ErrDeclined = errors.New("payment declined")

// Limit is the largest amount the charge step accepts.
const Limit = 100_000

// Saga is the checkout domain: one charge step on payment-service.
func Saga() orchestrator.Domain[Order] {
	return orchestrator.Domain[Order]{
		Name: Domain, // its callback topic: stacksaga.checkout.callback
		OnNext: orchestrator.Sequence[Order](
			orchestrator.Step{Service: PaymentService, Endpoint: Charge},
		),
	}
}
