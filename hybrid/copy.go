package hybrid

import "fmt"

// Copy-on-read. By default a value is shared: every caller gets the value
// L1 holds, which is what makes a hit cost nanoseconds, and callers must
// not modify it. With Options.CopyOnRead each caller gets its own copy,
// made by the value's Clone method when V has one (Clone() V), else by a
// round trip through the Codec.

// cloner is a V that copies itself.
type cloner[V any] interface{ Clone() V }

// copier returns the function that copies values for callers, or nil
// when values are shared.
func copier[V any](o *Options) func(V) (V, error) {
	if !o.CopyOnRead {
		return nil
	}
	var zero V
	if _, ok := any(zero).(cloner[V]); ok {
		return func(v V) (V, error) { return any(v).(cloner[V]).Clone(), nil }
	}
	cd := o.Codec
	return func(v V) (V, error) {
		var out V
		b, err := cd.Marshal(v)
		if err == nil {
			err = cd.Unmarshal(b, &out)
		}
		if err != nil {
			return out, fmt.Errorf("hybrid: copy-on-read: %w", err)
		}
		return out, nil
	}
}

// out gives a caller v, copied if CopyOnRead is set.
func (c *Cache[V]) out(v V, err error) (V, error) {
	if err != nil || c.copy == nil {
		return v, err
	}
	return c.copy(v)
}

// outMany copies the values of m in place if CopyOnRead is set.
func (c *Cache[V]) outMany(m map[string]V, err error) (map[string]V, error) {
	if c.copy == nil {
		return m, err
	}
	for k, v := range m {
		cp, cerr := c.copy(v)
		if cerr != nil {
			delete(m, k)
			if err == nil {
				err = cerr
			}
			continue
		}
		m[k] = cp
	}
	return m, err
}
