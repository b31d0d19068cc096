package schema

// ParseArrayText returns the elements of a PostgreSQL array in its text
// form ({a,"b c",NULL}, with or without explicit bounds), nested arrays
// flattened, a NULL element as nil: capture reads enum arrays' labels with
// it, as the sink converts arrays.
func ParseArrayText(s string) ([]*string, error) { return parseArray(s) }
