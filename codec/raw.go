package codec

import (
	"errors"
	"fmt"
)

// Raw is the codec that stores a []byte or a string as is, with no encoding.
// Its ID is IDRaw. The zero value is ready to use.
//
// Use it for values that are bytes already: rendered pages, serialized
// protobufs, images. Any other type is an error that wraps
// ErrUnsupportedType.
type Raw struct{}

// ID returns IDRaw.
func (Raw) ID() byte { return IDRaw }

// Marshal returns a copy of v, which must be a []byte, a string, a *[]byte or
// a *string. The copy is never nil, even for an empty or nil v.
func (Raw) Marshal(v any) ([]byte, error) {
	switch v := v.(type) {
	case []byte:
		return append(make([]byte, 0, len(v)), v...), nil
	case string:
		return []byte(v), nil
	case *[]byte:
		if v == nil {
			return nil, errors.New("codec: raw: marshal nil *[]byte")
		}
		return append(make([]byte, 0, len(*v)), *v...), nil
	case *string:
		if v == nil {
			return nil, errors.New("codec: raw: marshal nil *string")
		}
		return []byte(*v), nil
	}
	return nil, fmt.Errorf("codec: raw: marshal: %w %T: want []byte, string, *[]byte or *string", ErrUnsupportedType, v)
}

// Unmarshal stores a copy of data in v, which must be a non-nil *[]byte or
// *string. The stored slice is never nil and never shares memory with data,
// so the caller may reuse data once Unmarshal returns.
func (Raw) Unmarshal(data []byte, v any) error {
	switch v := v.(type) {
	case *[]byte:
		if v == nil {
			return errors.New("codec: raw: unmarshal into nil *[]byte")
		}
		*v = append(make([]byte, 0, len(data)), data...)
		return nil
	case *string:
		if v == nil {
			return errors.New("codec: raw: unmarshal into nil *string")
		}
		*v = string(data)
		return nil
	}
	return fmt.Errorf("codec: raw: unmarshal: %w %T: want *[]byte or *string", ErrUnsupportedType, v)
}
