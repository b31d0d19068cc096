package pipeline

// SettingsError is a problem with the settings a stage was given, found
// when it is built: the caller's input to fix, not a failure to retry.
type SettingsError struct{ Err error }

// Error returns the problem's message.
func (e *SettingsError) Error() string { return e.Err.Error() }

// Unwrap returns the problem.
func (e *SettingsError) Unwrap() error { return e.Err }
