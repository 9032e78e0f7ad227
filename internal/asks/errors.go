package asks

import "errors"

// Errors of the router's answers, matched with errors.Is on a [*RouterError]
// (which is what [Answer], [Withdraw] and [List] return for an error answer).
var (
	// ErrBadRequest: the request is not valid JSON or misses a field, or the
	// subject does not name a user.
	ErrBadRequest = errors.New("asks: bad request")
	// ErrBadAsk: an ask published on "asks.<module>" is not valid (see
	// [Validate]) or is already recorded for another asker.
	ErrBadAsk = errors.New("asks: bad ask")
	// ErrUnknownAsk: no ask of that id is recorded.
	ErrUnknownAsk = errors.New("asks: unknown ask")
	// ErrNotOpen: the ask is answered or expired (for [Withdraw]: answered).
	ErrNotOpen = errors.New("asks: ask not open")
	// ErrOtherAsker: the ask to withdraw was raised by another asker.
	ErrOtherAsker = errors.New("asks: ask of another asker")
	// ErrUnknownOption: the ask offers no option of that id.
	ErrUnknownOption = errors.New("asks: option not offered")
	// ErrRecords: the router could not read or write mesh-asks_records.
	ErrRecords = errors.New("asks: records not available")
	// ErrNoRouter: no ask router answers on the bus.
	ErrNoRouter = errors.New("asks: no ask router answers")
)

// codes name the sentinel errors on the wire, in a reply's "code".
var codes = map[string]error{
	"bad-request":    ErrBadRequest,
	"bad-ask":        ErrBadAsk,
	"unknown-ask":    ErrUnknownAsk,
	"not-open":       ErrNotOpen,
	"other-asker":    ErrOtherAsker,
	"unknown-option": ErrUnknownOption,
	"records":        ErrRecords,
}

// RouterError is an error the ask router answered: its code and the why it
// said. It unwraps to the sentinel its code names (for example
// [ErrNotOpen]).
type RouterError struct {
	Code string // "bad-request", "bad-ask", "unknown-ask", "not-open", "other-asker", "unknown-option" or "records"
	Why  string // what the router said, naming the ask and option
}

// Error returns the why.
func (e *RouterError) Error() string { return e.Why }

// Unwrap returns the sentinel error of the code, or nil for a code this
// version does not know.
func (e *RouterError) Unwrap() error { return codes[e.Code] }

func refusal(code, why string) *RouterError { return &RouterError{Code: code, Why: why} }
