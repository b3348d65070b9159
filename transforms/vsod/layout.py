"""The release's top folder, shared by the reader and the miniature writer."""

DATASET_FOLDER = "OcclusionDataSet-MM20"
