"""The reference trainers (``dpaudit.trainers``): one DP engine along Opacus' seams (privacy unit x trainable parameters x noise) and one module per method."""
