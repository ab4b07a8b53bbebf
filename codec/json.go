package codec

import (
	"encoding/json"
	"errors"
	"fmt"
)

// JSON is the codec that stores values as JSON, using encoding/json. Its ID
// is IDJSON. The zero value is ready to use.
//
// Values are encoded as json.Marshal encodes them, so struct tags, custom
// MarshalJSON methods and the rules for unexported fields all apply.
// encoding/json limits nesting to 10000 levels and allocates only in
// proportion to the input, so hostile bytes need no extra checks.
type JSON struct{}

// ID returns IDJSON.
func (JSON) ID() byte { return IDJSON }

// Marshal returns the JSON encoding of v in a fresh slice.
func (JSON) Marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("codec: json: %w", err)
	}
	return b, nil
}

// Unmarshal decodes the JSON value in data into v, which must be a non-nil
// pointer. Input that is not valid JSON (truncated, trailing garbage, nested
// more than 10000 levels deep) gives an error that wraps both ErrMalformed
// and the *json.SyntaxError.
func (JSON) Unmarshal(data []byte, v any) error {
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Errorf("codec: json: %w: %w", ErrMalformed, err)
	}
	return fmt.Errorf("codec: json: %w", err)
}
