"""The workbook: what the lessons share (charts, controls, the live chart)."""
