// Package textcut shortens text to a number of bytes without cutting a
// UTF-8 character in half, for the places that bound untrusted or long text
// before they show it: a dead letter's error header, an API error message,
// a health check's detail. It owns the cut; how a shortened text is marked
// stays with the caller when "…" does not suit it.
//
// It imports nothing of walhouse, so every package may use it.
package textcut
