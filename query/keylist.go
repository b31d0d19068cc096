package query

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ReadKeyList reads the keys file at path as a list, for walhouse apikey
// to edit; nil when it does not exist yet.
func ReadKeyList(path string) ([]Key, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the API keys file: %w", err)
	}
	if _, err := ParseKeys(data); err != nil {
		return nil, fmt.Errorf("API keys file %s: %w; fix it before changing it", path, err)
	}
	var list []Key
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("API keys file %s: %w", path, err)
	}
	return list, nil
}

// WriteKeyList checks list as serve will (ParseKeys) and replaces the file
// at path with it in one rename, readable by its owner only.
func WriteKeyList(path string, list []Key) error {
	if list == nil {
		list = []Key{}
	}
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if _, err := ParseKeys(data); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write the API keys file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write the API keys file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write the API keys file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write the API keys file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write the API keys file: %w", err)
	}
	return nil
}
