from hwr.data.datamodule import StrokeData, StrokeDataBase

__all__ = ["StrokeData", "StrokeDataBase"]
