// Package placeorder is the place-order saga shared by the examples and the
// demo: reserve stock (inventory-service) → charge payment (payment-service)
// → ship (shipping-service), each with a compensation.
//
// An order with AsyncPayment has its payment authorised asynchronously: the
// payment step asks the gateway for an authorisation, hands it the step's
// idempotency key as the payment reference (PaymentRef), and pauses the
// saga (event PaymentAuthorisation, deadline PaymentAuthorisationTimeout).
// The gateway's callback resumes it with the correlation key PaymentRef and
// a resume context whose "status" is PaymentAuthorised (the saga ships) or
// anything else, say "declined" (the saga fails and compensates: the
// payment is refunded, the stock released). If no callback comes by the
// deadline, the payment step is invoked again against the order as it was
// before it, finds the authorisation still missing and fails: the stock is
// released.
package placeorder

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
	"github.com/stacksaga-go/stacksaga/worker"
)

// Names of the saga domain and of the services taking part.
const (
	Domain           = "place-order"
	OrderService     = "order-service"
	InventoryService = "inventory-service"
	PaymentService   = "payment-service"
	ShippingService  = "shipping-service"
)

// Endpoint names.
const (
	ReserveStock  = "reserve-stock"
	ChargePayment = "charge-payment"
	ShipOrder     = "ship-order"
)

// The asynchronous payment authorisation.
const (
	// PaymentAuthorisation is the event a saga with AsyncPayment waits
	// for once its payment step ran.
	PaymentAuthorisation = "PAYMENT_AUTHORISATION"
	// PaymentAuthorisationTimeout is the pause's deadline.
	PaymentAuthorisationTimeout = 15 * time.Minute
	// StatusKey is the resume context's key of the gateway's verdict.
	StatusKey = "status"
	// PaymentAuthorised is the verdict that lets the saga ship.
	PaymentAuthorised = "authorised"
)

// Order is the saga's domain entity.
type Order struct {
	OrderID    string `msgpack:"order_id" json:"order_id"`
	CustomerID string `msgpack:"customer_id" json:"customer_id"`
	Item       string `msgpack:"item" json:"item"`
	Quantity   int    `msgpack:"quantity" json:"quantity"`
	Amount     int64  `msgpack:"amount" json:"amount"` // in cents

	// Set by the steps.
	ReservationID string `msgpack:"reservation_id,omitempty" json:"reservation_id,omitempty"`
	PaymentID     string `msgpack:"payment_id,omitempty" json:"payment_id,omitempty"`
	TrackingID    string `msgpack:"tracking_id,omitempty" json:"tracking_id,omitempty"`
	Released      bool   `msgpack:"released,omitempty" json:"released,omitempty"`
	Refunded      bool   `msgpack:"refunded,omitempty" json:"refunded,omitempty"`

	// FailShipping makes the shipping step fail non-retryably, so the saga
	// compensates (used by the demo's --fail-rate).
	FailShipping bool `msgpack:"fail_shipping,omitempty" json:"fail_shipping,omitempty"`
	// TransientOnce has bit i set when step i's first attempt must fail
	// retryably, as a payment gateway timing out would (used by the demo's
	// --transient-rate); the retry succeeds.
	TransientOnce uint8 `msgpack:"transient_once,omitempty" json:"transient_once,omitempty"`
	// AsyncPayment makes the payment step pause the saga until the payment
	// gateway's callback resumes it (used by the order-service's
	// "async_payment" and by the demo's --pause-rate).
	AsyncPayment bool `msgpack:"async_payment,omitempty" json:"async_payment,omitempty"`
	// PaymentRef is the reference the gateway calls back with, set by an
	// asynchronous payment step: its idempotency key, the saga's
	// correlation key.
	PaymentRef string `msgpack:"payment_ref,omitempty" json:"payment_ref,omitempty"`
}

// ErrTransient is the retryable failure TransientOnce injects.
var ErrTransient = errors.New("gateway timeout (transient)")

// transient returns the retryable failure TransientOnce asks for at s, or
// nil. It comes before the step does anything, so the failed attempt has no
// effect and is not an execution.
func transient(in Order, s *worker.Step) error {
	if s.Kind == topics.KindProcess && s.Attempt == 1 && s.Span < 8 && in.TransientOnce&(1<<s.Span) != 0 {
		return worker.Retryable(ErrTransient)
	}
	return nil
}

// firstAttempt is the attempt at which step s first runs for real: 1, or
// 2 when TransientOnce failed attempt 1 (a restore re-sends the same
// attempt; only a retry and a pause's deadline count attempts up).
func firstAttempt(in Order, s *worker.Step) int {
	if s.Kind == topics.KindProcess && s.Span < 8 && in.TransientOnce&(1<<s.Span) != 0 {
		return 2
	}
	return 1
}

// Names are the domain and service names of one deployment of the saga.
// They name the Kafka topics and consumer groups, so runs that share a
// broker and must not see each other use different names.
type Names struct {
	Domain, Order, Inventory, Payment, Shipping string
}

// DefaultNames are the names of the examples.
func DefaultNames() Names {
	return Names{Domain: Domain, Order: OrderService, Inventory: InventoryService, Payment: PaymentService, Shipping: ShippingService}
}

// WithSuffix returns n with "-suffix" appended to every name ("" returns n).
func (n Names) WithSuffix(suffix string) Names {
	if suffix == "" {
		return n
	}
	add := func(s string) string { return s + "-" + suffix }
	return Names{Domain: add(n.Domain), Order: add(n.Order), Inventory: add(n.Inventory), Payment: add(n.Payment), Shipping: add(n.Shipping)}
}

// Saga returns the place-order domain with the default names: the three
// steps in order.
func Saga() orchestrator.Domain[Order] { return SagaNamed(DefaultNames()) }

// SagaNamed returns the place-order domain with names n: the three steps
// in order, except that a payment resumed with a verdict other than
// PaymentAuthorised fails the saga (it compensates).
func SagaNamed(n Names) orchestrator.Domain[Order] {
	steps := orchestrator.Sequence[Order](
		orchestrator.Step{Service: n.Inventory, Endpoint: ReserveStock},
		orchestrator.Step{Service: n.Payment, Endpoint: ChargePayment},
		orchestrator.Step{Service: n.Shipping, Endpoint: ShipOrder},
	)
	return orchestrator.Domain[Order]{
		Name: n.Domain,
		OnNext: func(ctx context.Context, s *orchestrator.Saga[Order]) orchestrator.Decision {
			if s.Resume != nil && s.Last != nil && s.Last.Step.Endpoint == ChargePayment {
				if st := s.Resume[StatusKey]; st != PaymentAuthorised {
					return orchestrator.Fail(fmt.Sprintf("%v: gateway status %q", ErrPaymentNotAuthorised, st))
				}
			}
			return steps(ctx, s)
		},
	}
}

// ErrPaymentNotAuthorised is the business failure of an asynchronous
// payment: declined by the gateway, or no verdict by the deadline.
var ErrPaymentNotAuthorised = errors.New("payment: not authorised")

// ErrAddressRejected is the business failure of the shipping step.
var ErrAddressRejected = errors.New("shipping: address rejected")

// Observer, if set, is called at every business-handler execution (the
// demo counts executions with it). It must be safe for concurrent use.
type Observer func(s *worker.Step)

func observe(o Observer, s *worker.Step) {
	if o != nil {
		o(s)
	}
}

// RegisterInventory registers the reserve-stock endpoint on w.
func RegisterInventory(w *worker.Worker, o Observer) error {
	return worker.Register(w, worker.Endpoint[Order]{
		Name: ReserveStock,
		Process: func(_ context.Context, s *worker.Step, in Order) (Order, error) {
			if err := transient(in, s); err != nil {
				return in, err
			}
			observe(o, s)
			in.ReservationID = "rsv-" + s.IdempotencyKey
			return in, nil
		},
		Revert: func(_ context.Context, s *worker.Step, in Order) (Order, error) {
			observe(o, s)
			in.Released = true
			return in, nil
		},
	})
}

// RegisterPayment registers the charge-payment endpoint on w.
func RegisterPayment(w *worker.Worker, o Observer) error {
	return worker.Register(w, worker.Endpoint[Order]{
		Name: ChargePayment,
		Process: func(_ context.Context, s *worker.Step, in Order) (Order, error) {
			return charge(o, s, in)
		},
		Revert: func(_ context.Context, s *worker.Step, in Order) (Order, error) {
			return refund(o, s, in), nil
		},
	})
}

// charge is the payment step's forward action.
func charge(o Observer, s *worker.Step, in Order) (Order, error) {
	if err := transient(in, s); err != nil {
		return in, err
	}
	observe(o, s)
	if in.AsyncPayment {
		if s.Attempt > firstAttempt(in, s) {
			// Invoked again by the pause's deadline, against the
			// order as it was before the attempt that paused: the
			// gateway never called back.
			return in, worker.NonRetryable(fmt.Errorf("%w: no verdict within %v", ErrPaymentNotAuthorised, PaymentAuthorisationTimeout))
		}
		// Ask the gateway for an authorisation (here: nothing to
		// do) and wait for its callback, which names the payment
		// by PaymentRef: the saga's correlation key.
		in.PaymentRef = s.IdempotencyKey
		in.PaymentID = "pay-" + s.IdempotencyKey
		s.Pause(PaymentAuthorisation, PaymentAuthorisationTimeout)
		return in, nil
	}
	in.PaymentID = "pay-" + s.IdempotencyKey
	return in, nil
}

// refund is the payment step's compensation.
func refund(o Observer, s *worker.Step, in Order) Order {
	observe(o, s)
	in.Refunded = true
	s.PutHint("refund-id", "ref-"+in.PaymentID)
	return in
}

// RegisterShipping registers the ship-order endpoint on w.
func RegisterShipping(w *worker.Worker, o Observer) error {
	return worker.Register(w, worker.Endpoint[Order]{
		Name: ShipOrder,
		Process: func(_ context.Context, s *worker.Step, in Order) (Order, error) {
			if err := transient(in, s); err != nil {
				return in, err
			}
			observe(o, s)
			if in.FailShipping {
				return in, worker.NonRetryable(ErrAddressRejected)
			}
			in.TrackingID = "trk-" + s.IdempotencyKey
			return in, nil
		},
		Revert: func(_ context.Context, s *worker.Step, in Order) (Order, error) {
			observe(o, s)
			in.TrackingID = ""
			return in, nil
		},
	})
}
